//! The structural diff of two objects (reference §4).
//!
//! The diff walks both objects at once and never copies them: the implicit system fields,
//! `exclude` subtrees and the bypass annotation are simply not visited, and `include` limits
//! the walk to its subtrees. Lists are aligned by merge key the way strategic merge patch does,
//! decided on the whole (unscoped) elements so that scoping never changes which elements
//! correspond. `null`, an absent key, `{}` and `[]` are all "absent".
//!
//! It is written once against [`Node`], so a parsed document and the raw text of a request
//! are compared by the same code; with raw text, subtrees whose bytes are equal are settled
//! without being read. For the built-in kinds, a zero the API server leaves out (`paused: false`,
//! [`crate::omitted`]) is absent too; the table is consulted only where one side of a field
//! is absent, so comparing what the API server sent costs nothing more. Changes go to a [`Sink`]: every one into a list ([`diff`]), or — on the
//! admission path — only those an answer will show, the rest counted.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::json::{LazyValue, MapView, Node, Shape};
use crate::omitted::{OmittedZeros, Place};
use crate::path::{AsSegment, FieldPath, PathPattern, PathSegment, SegmentRef};

mod lists;

pub(crate) use lists::{element_key, element_keys, merge_key_for};

/// How much of the subtree at a path takes part in the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Nothing here is compared.
    Out,
    /// Everything here is compared.
    In,
    /// The node itself is compared, but some subtrees below it are not (an `exclude` or a
    /// system field reaches below it): a scalar here is compared.
    InExceptBelow,
    /// Only some subtrees below the node are compared (an `include` reaches below it), not
    /// the node itself: a scalar here is not compared.
    OnlyBelow,
}

impl Coverage {
    /// Some, but not all, of the subtree is compared.
    pub fn is_partial(self) -> bool {
        matches!(self, Coverage::InExceptBelow | Coverage::OnlyBelow)
    }
}

/// Which subtrees are compared: built once per rule.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// `Some`: only these subtrees are compared.
    include: Option<Vec<PathPattern>>,
    /// Subtrees never compared (system fields, `exclude`, the bypass annotation).
    skip: Vec<PathPattern>,
}

impl Scope {
    pub fn new(include: Option<Vec<PathPattern>>, skip: Vec<PathPattern>) -> Self {
        Self { include, skip }
    }

    /// The scope that compares everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// reference §4 subtree semantics: a pattern takes part at a path when it matches the path or
    /// an ancestor (`covers`); one that only reaches *below* the path says nothing about the
    /// node itself — an `exclude` reaching below a scalar never removes that scalar, an
    /// `include` reaching below it never selects it.
    pub fn coverage<S: AsSegment>(&self, path: &[S]) -> Coverage {
        if self.skip.iter().any(|p| p.covers(path)) {
            return Coverage::Out;
        }
        let included = match &self.include {
            None => Coverage::In,
            Some(include) if include.iter().any(|p| p.covers(path)) => Coverage::In,
            Some(include) if include.iter().any(|p| p.reaches_below(path)) => Coverage::OnlyBelow,
            Some(_) => return Coverage::Out,
        };
        if included == Coverage::In && self.skip.iter().any(|p| p.reaches_below(path)) {
            Coverage::InExceptBelow
        } else {
            included
        }
    }

    fn child_coverage<S: AsSegment>(&self, parent: Coverage, path: &[S]) -> Coverage {
        // Everything below a fully compared node is fully compared: nothing skipped reaches
        // below it and an include covers it.
        match parent {
            Coverage::In => Coverage::In,
            _ => self.coverage(path),
        }
    }
}

/// What kind of change a path saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Removed,
    Modified,
    /// Kept list elements changed their relative order; reported at the list.
    Reordered,
}

/// One changed path with the values on each side (absent sides are `None`). A value from a
/// request's body stays its text until shown (see [`LazyValue`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Change<'a> {
    pub path: FieldPath,
    pub kind: ChangeKind,
    pub old: Option<LazyValue<'a>>,
    pub new: Option<LazyValue<'a>>,
}

impl Change<'_> {
    /// The same change, borrowing nothing.
    pub fn into_owned(self) -> Change<'static> {
        Change {
            path: self.path,
            kind: self.kind,
            old: self.old.map(LazyValue::into_owned),
            new: self.new.map(LazyValue::into_owned),
        }
    }

    /// The old value, read from the body's text if it is text.
    pub fn old_value(&self) -> Option<Cow<'_, Value>> {
        self.old.as_ref().map(LazyValue::value)
    }

    /// The new value, read from the body's text if it is text.
    pub fn new_value(&self) -> Option<Cow<'_, Value>> {
        self.new.as_ref().map(LazyValue::value)
    }
}

/// One step of the path the walk is at: keys borrowed from the documents where they can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathStep<'a> {
    Key(Cow<'a, str>),
    Index(usize),
}

impl AsSegment for PathStep<'_> {
    #[inline]
    fn as_segment(&self) -> SegmentRef<'_> {
        match self {
            PathStep::Key(key) => SegmentRef::Key(key),
            PathStep::Index(index) => SegmentRef::Index(*index),
        }
    }
}

impl From<&PathStep<'_>> for PathSegment {
    fn from(step: &PathStep<'_>) -> Self {
        match step {
            PathStep::Key(key) => PathSegment::Key(key.as_ref().to_owned()),
            PathStep::Index(index) => PathSegment::Index(*index),
        }
    }
}

/// One side of a change: a value of the compared documents, or the in-scope part of one.
#[derive(Debug, Clone)]
pub enum Side<N> {
    Node(N),
    /// The part of a value that a partial scope compares (a copy).
    Projected(Value),
}

impl<'a, N: Node<'a>> Side<N> {
    pub fn into_value(self) -> Cow<'a, Value> {
        match self {
            Side::Node(node) => node.to_value(),
            Side::Projected(value) => Cow::Owned(value),
        }
    }

    /// The side as a change holds it: a node of a body stays its text.
    pub fn into_lazy_value(self) -> LazyValue<'a> {
        match self {
            Side::Node(node) => node.to_lazy_value(),
            Side::Projected(value) => LazyValue::from(value),
        }
    }
}

/// A change the diff found, as it hands it to a [`Sink`].
#[derive(Debug)]
pub struct Found<'p, 'a, N> {
    /// Where, from the root of the objects.
    pub path: &'p [PathStep<'a>],
    pub kind: ChangeKind,
    pub old: Option<Side<N>>,
    pub new: Option<Side<N>>,
    /// The change just reported was at the same path (an element removed and another added at
    /// one index), so the path is not a new one.
    pub repeat: bool,
}

impl<N> Found<'_, '_, N> {
    /// The path as a [`FieldPath`] of its own.
    pub fn field_path(&self) -> FieldPath {
        FieldPath::from(self.path.iter().map(PathSegment::from).collect::<Vec<_>>())
    }
}

/// Where the diff puts what it finds.
pub trait Sink<'a, N> {
    /// A change.
    fn change(&mut self, found: Found<'_, 'a, N>);
}

/// Every change, in the order found.
impl<'a, N: Node<'a>> Sink<'a, N> for Vec<Change<'a>> {
    fn change(&mut self, found: Found<'_, 'a, N>) {
        self.push(Change {
            path: found.field_path(),
            kind: found.kind,
            old: found.old.map(Side::into_lazy_value),
            new: found.new.map(Side::into_lazy_value),
        });
    }
}

/// Diffs `old` against `new` within `scope`. `descend` are the patterns (a rule's `mutable`)
/// that make the diff look inside an added, removed or retyped map instead of reporting it
/// whole, so that only the parts they do not cover are reported. `zeros` are the zeros the
/// objects' kind leaves out, which count as absent.
pub fn diff<'a, N: Node<'a>>(
    old: N,
    new: N,
    scope: &Scope,
    descend: &[PathPattern],
    zeros: OmittedZeros,
) -> Vec<Change<'a>> {
    let mut changes = Vec::new();
    diff_into(old, new, scope, descend, zeros, &mut changes);
    changes
}

/// [`diff`], each change handed to `sink` as it is found.
pub fn diff_into<'a, N: Node<'a>, K: Sink<'a, N>>(
    old: N,
    new: N,
    scope: &Scope,
    descend: &[PathPattern],
    zeros: OmittedZeros,
    sink: &mut K,
) {
    let mut walker = Walker {
        scope,
        descend,
        zeros,
        path: Vec::with_capacity(16),
        sink,
        _node: std::marker::PhantomData,
    };
    let coverage = scope.coverage::<SegmentRef<'_>>(&[]);
    match (old.shape(), new.shape()) {
        // The root is always compared key by key, even when it is empty.
        (Shape::Object, Shape::Object) if coverage != Coverage::Out => {
            if !old.identical(new) {
                walker.walk_maps(old.as_map().as_ref(), new.as_map().as_ref(), coverage)
            }
        }
        _ => walker.walk(Some(old), Some(new), coverage),
    }
}

/// The part of `value`, found at `path`, that `scope` compares; `None` when nothing of it is.
/// For the audit's changes that do not come out of [`diff`] (fields owned by an imperative
/// edit), so that they are scoped exactly as the diff scopes its own.
pub fn scoped_value<'a>(
    scope: &Scope,
    path: &'a FieldPath,
    value: &'a Value,
) -> Option<Cow<'a, Value>> {
    let steps: Vec<PathStep<'a>> = path
        .segments()
        .iter()
        .map(|s| match s {
            PathSegment::Key(key) => PathStep::Key(Cow::Borrowed(key)),
            PathSegment::Index(index) => PathStep::Index(*index),
        })
        .collect();
    let coverage = scope.coverage(&steps);
    let mut unused: Vec<Change<'a>> = Vec::new();
    let mut walker = Walker {
        scope,
        descend: &[],
        zeros: OmittedZeros::NONE,
        path: steps,
        sink: &mut unused,
        _node: std::marker::PhantomData,
    };
    walker.scoped(value, coverage).map(Side::into_value)
}

/// Walks both objects at once. The path is kept as borrowed keys, so visiting a node costs no
/// allocation; a path is copied only when a sink keeps a change.
struct Walker<'s, 'a, N, K> {
    scope: &'s Scope,
    descend: &'s [PathPattern],
    zeros: OmittedZeros,
    path: Vec<PathStep<'a>>,
    sink: &'s mut K,
    _node: std::marker::PhantomData<N>,
}

impl<'a, N: Node<'a>, K: Sink<'a, N>> Walker<'_, 'a, N, K> {
    /// Compares one node of each side; every recursion of the walk passes through here, so
    /// this is where the stack is kept large enough for the deepest accepted input.
    fn walk(&mut self, old: Option<N>, new: Option<N>, coverage: Coverage) {
        crate::nesting::guarded(|| self.walk_node(old, new, coverage))
    }

    fn walk_node(&mut self, old: Option<N>, new: Option<N>, coverage: Coverage) {
        if coverage == Coverage::Out {
            return;
        }
        if let (Some(a), Some(b)) = (old, new) {
            if a.identical(b) {
                return;
            }
            // Two scalars: the common leaf, settled without the absence tests below.
            let (shape_a, shape_b) = (a.shape(), b.shape());
            if shape_a.is_scalar() && shape_b.is_scalar() {
                if !(shape_a == shape_b && a.scalar_eq(b)) {
                    self.changed_node(old, new, coverage);
                }
                return;
            }
        }
        let old = present(old);
        let new = present(new);
        match (old, new) {
            (None, None) => {}
            (Some(a), Some(b)) => match (a.shape(), b.shape()) {
                (Shape::Object, Shape::Object) => {
                    self.walk_maps(a.as_map().as_ref(), b.as_map().as_ref(), coverage)
                }
                (Shape::Array, Shape::Array) => self.walk_lists(a, b, coverage),
                _ if value_eq(a, b) => {}
                // A key whose value changed type: an object of nothing but zeros the kind
                // leaves out is absent, so the key was added or removed rather than retyped.
                _ => {
                    let object_left_out = |v: &N| v.shape() == Shape::Object && self.omitted(*v);
                    let (old, new) = (
                        old.filter(|v| !object_left_out(v)),
                        new.filter(|v| !object_left_out(v)),
                    );
                    self.changed_node(old, new, coverage)
                }
            },
            // reference §4: a zero the API server leaves out is as absent as the other side.
            (Some(one), None) | (None, Some(one)) if self.omitted(one) => {}
            _ => self.changed_node(old, new, coverage),
        }
    }

    /// Whether `value`, at the current path, is a zero the kind leaves out (or an object of
    /// nothing else): looked up only where the other side is absent.
    fn omitted(&self, value: N) -> bool {
        self.zeros.omits(&self.path, value)
    }

    fn walk_maps(&mut self, old: Option<&N::Map>, new: Option<&N::Map>, coverage: Coverage) {
        for_each_key(old, new, |key, old_value, new_value| {
            // Most nodes are unchanged: settle them without the bookkeeping of a walk.
            if let (Some(a), Some(b)) = (old_value, new_value)
                && (a.identical(b) || (a.shape().is_scalar() && scalars_eq(a, b)))
            {
                return;
            }
            self.path.push(PathStep::Key(key));
            let child = self.scope.child_coverage(coverage, &self.path);
            self.walk(old_value, new_value, child);
            self.path.pop();
        });
    }

    /// A node whose value was added, removed, changed type or changed as a scalar.
    fn changed_node(&mut self, old: Option<N>, new: Option<N>, coverage: Coverage) {
        let at_map_key = matches!(self.path.last(), Some(PathStep::Key(_)));
        if at_map_key && self.wants_descent() {
            // Descend into the container(s); a side of another type counts as absent. A list
            // is descended to its elements, which are then reported whole at their index.
            let shape_is = |side: Option<N>, shape| side.is_some_and(|v| v.shape() == shape);
            let (old_map, new_map) = (shape_is(old, Shape::Object), shape_is(new, Shape::Object));
            let (old_list, new_list) = (shape_is(old, Shape::Array), shape_is(new, Shape::Array));
            if old_map || new_map {
                let maps = |side: Option<N>, is_map| side.filter(|_| is_map).and_then(N::as_map);
                self.walk_maps(
                    maps(old, old_map).as_ref(),
                    maps(new, new_map).as_ref(),
                    coverage,
                );
            }
            if old_list || new_list {
                self.walk_retyped_lists(
                    old.filter(|_| old_list),
                    new.filter(|_| new_list),
                    coverage,
                );
            }
            if old_map || new_map || old_list || new_list {
                // reference §4: "descends into it (missing side = absent)" — a scalar on the other
                // side of a retyped key counts as absent; only the container's parts are judged.
                return;
            }
        }
        // Whole, every caller compared them already and found them different; in part, they
        // are compared here, on the nodes: a projection is a copy for the report, and a copy
        // holds a number as a double (§4: numbers compare exactly).
        if coverage.is_partial()
            && let (Some(a), Some(b)) = (old, new)
            && self.scoped_eq(Some(a), Some(b), coverage)
        {
            return;
        }
        let old_value = old.and_then(|v| self.scoped(v, coverage));
        let new_value = new.and_then(|v| self.scoped(v, coverage));
        let kind = match (&old_value, &new_value) {
            (None, None) => return,
            (None, Some(_)) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Removed,
            (Some(_), Some(_)) => ChangeKind::Modified,
        };
        self.record(kind, old_value, new_value, false);
    }

    /// A deeper descent pattern reaches below this path and none covers the path itself.
    fn wants_descent(&self) -> bool {
        self.descend.iter().any(|p| p.reaches_below(&self.path))
            && !self.descend.iter().any(|p| p.covers(&self.path))
    }

    fn record(
        &mut self,
        kind: ChangeKind,
        old: Option<Side<N>>,
        new: Option<Side<N>>,
        repeat: bool,
    ) {
        self.sink.change(Found {
            path: &self.path,
            kind,
            old,
            new,
            repeat,
        });
    }

    /// The part of `value` (at the current path) that is in scope; `None` when nothing is.
    fn scoped(&mut self, value: N, coverage: Coverage) -> Option<Side<N>> {
        match coverage {
            Coverage::Out => None,
            Coverage::In => present(Some(value)).map(Side::Node),
            Coverage::InExceptBelow | Coverage::OnlyBelow => {
                self.project(value, coverage).map(Side::Projected)
            }
        }
    }

    /// Whether the in-scope parts of `a` and `b` at the current path are equal — what
    /// comparing their [`Self::scoped`] copies with [`value_eq`] would say (a missing side or
    /// a part with nothing in scope counts as absent), but on the nodes themselves, so that
    /// numbers compare exactly.
    fn scoped_eq(&mut self, a: Option<N>, b: Option<N>, coverage: Coverage) -> bool {
        match coverage {
            Coverage::Out => true,
            Coverage::In => match (present(a), present(b)) {
                (None, None) => true,
                (Some(a), Some(b)) => value_eq_at(a, b, self.zeros.place_at(&self.path)),
                (Some(one), None) | (None, Some(one)) => self.omitted(one),
            },
            Coverage::InExceptBelow | Coverage::OnlyBelow => {
                let shapes = (a.map(|v| v.shape()), b.map(|v| v.shape()));
                match shapes {
                    (Some(Shape::Object), Some(Shape::Object)) => {
                        let (Some(x), Some(y)) = (a.and_then(N::as_map), b.and_then(N::as_map))
                        else {
                            return false;
                        };
                        let mut equal = true;
                        for_each_key(Some(&x), Some(&y), |key, x, y| {
                            if equal {
                                self.path.push(PathStep::Key(key));
                                let child = self.scope.coverage(&self.path);
                                equal = crate::nesting::guarded(|| self.scoped_eq(x, y, child));
                                self.path.pop();
                            }
                        });
                        equal
                    }
                    (Some(Shape::Array), Some(Shape::Array)) => {
                        let (Some(x), Some(y)) = (a, b) else {
                            return false;
                        };
                        self.scoped_lists_eq(x, y, coverage)
                    }
                    (Some(x), Some(y))
                        if x.is_scalar()
                            && y.is_scalar()
                            && x != Shape::Null
                            && y != Shape::Null =>
                    {
                        // A scalar is in scope only when the node itself is.
                        coverage == Coverage::OnlyBelow
                            || (x == y && a.zip(b).is_some_and(|(a, b)| a.scalar_eq(b)))
                    }
                    // Different shapes: equal only when neither has anything in scope (a
                    // zero the kind leaves out has nothing).
                    _ => {
                        let nothing = |walker: &mut Self, side: Option<N>| {
                            side.is_none_or(|v| {
                                walker.omitted(v) || walker.scoped(v, coverage).is_none()
                            })
                        };
                        nothing(self, a) && nothing(self, b)
                    }
                }
            }
        }
    }

    /// Copies the in-scope part of `value` at the current path. Used only for values that are
    /// reported whole under partial coverage, which is rare; the common path never copies.
    fn project(&mut self, value: N, coverage: Coverage) -> Option<Value> {
        match coverage {
            Coverage::Out => None,
            Coverage::In => present(Some(value)).map(|v| v.to_value().into_owned()),
            Coverage::InExceptBelow | Coverage::OnlyBelow => match value.shape() {
                Shape::Object => {
                    let map = value.as_map()?;
                    let mut out = Map::new();
                    for (key, child_value) in map.iter() {
                        self.path.push(PathStep::Key(key));
                        let child = self.scope.coverage(&self.path);
                        let projected =
                            crate::nesting::guarded(|| self.project(child_value, child));
                        if let (Some(projected), Some(PathStep::Key(key))) =
                            (projected, self.path.pop())
                        {
                            out.insert(key.into_owned(), projected);
                        }
                    }
                    (!out.is_empty()).then_some(Value::Object(out))
                }
                Shape::Array => self.project_list(value.items()?, coverage),
                Shape::Null => None,
                // A scalar has no descendants: it is compared exactly when the node itself is.
                _ => (coverage == Coverage::InExceptBelow).then(|| value.to_value().into_owned()),
            },
        }
    }
}

/// Calls `f` once per key of either map with each side's value.
///
/// Two versions of one object nearly always carry the same keys in the same order (the API
/// server serialises both from the same types, and both documents keep that order), so the
/// maps are walked side by side while their keys agree; from the first disagreement on, keys
/// are looked up instead.
fn for_each_key<'a, N: Node<'a>, M: MapView<'a, N>>(
    old: Option<&M>,
    new: Option<&M>,
    mut f: impl FnMut(Cow<'a, str>, Option<N>, Option<N>),
) {
    let (old, new) = match (old, new) {
        (Some(old), Some(new)) => (old, new),
        (Some(old), None) => return old.iter().for_each(|(k, v)| f(k, Some(v), None)),
        (None, Some(new)) => return new.iter().for_each(|(k, v)| f(k, None, Some(v))),
        (None, None) => return,
    };
    let mut shared = 0;
    for ((ka, va), (kb, vb)) in old.iter().zip(new.iter()) {
        if !crate::json::str_eq(&ka, &kb) {
            break;
        }
        f(ka, Some(va), Some(vb));
        shared += 1;
    }
    if shared == old.len() && shared == new.len() {
        return;
    }
    for (key, value) in old.iter().skip(shared) {
        let other = new.get(&key);
        f(key, Some(value), other);
    }
    for (key, value) in new.iter().skip(shared) {
        if !old.contains_key(&key) {
            f(key, None, Some(value));
        }
    }
}

/// Whether two maps are equal after normalisation, stopping at the first difference. Same
/// side-by-side walk as [`for_each_key`]. `place`: where the maps are in the kind's table of
/// omitted zeros, if anywhere.
#[inline(never)]
fn maps_eq<'a, N: Node<'a>, M: MapView<'a, N>>(x: &M, y: &M, place: Option<Place>) -> bool {
    crate::nesting::guarded(|| maps_eq_unguarded(x, y, place))
}

fn maps_eq_unguarded<'a, N: Node<'a>, M: MapView<'a, N>>(
    x: &M,
    y: &M,
    place: Option<Place>,
) -> bool {
    // The table is consulted for an entry only when it is a container (a scalar needs no place)
    // or when one side lacks it.
    let below = |key: &str, v: N| match v.shape() {
        Shape::Object | Shape::Array => place.and_then(|p| p.key(key)),
        _ => None,
    };
    let lone_absent =
        |key: &str, v: N| v.is_absent() || place.is_some_and(|p| p.omits_entry(key, v));
    let mut shared = 0;
    for ((ka, va), (kb, vb)) in x.iter().zip(y.iter()) {
        if !crate::json::str_eq(&ka, &kb) {
            break;
        }
        if !value_eq_at(va, vb, below(&ka, va)) {
            return false;
        }
        shared += 1;
    }
    if shared == x.len() && shared == y.len() {
        return true;
    }
    let old_side_eq = x.iter().skip(shared).all(|(key, a)| match y.get(&key) {
        Some(b) => value_eq_at(a, b, below(&key, a)),
        None => lone_absent(&key, a),
    });
    old_side_eq
        && y.iter()
            .skip(shared)
            .all(|(key, b)| x.contains_key(&key) || lone_absent(&key, b))
}

/// `value[key]` of a document.
#[inline]
pub fn field<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    Node::get(value, key)
}

/// `None` for values that count as absent.
fn present<'a, N: Node<'a>>(value: Option<N>) -> Option<N> {
    value.filter(|v| !v.is_absent())
}

/// `null`, `[]`, and maps whose every entry is absent (so `{}` too) are absent.
pub fn is_absent(value: &Value) -> bool {
    Node::is_absent(value)
}

/// Two values known to be scalars: equal when of one type and equal as that type.
#[inline]
fn scalars_eq<'a, N: Node<'a>>(a: N, b: N) -> bool {
    a.shape() == b.shape() && a.scalar_eq(b)
}

#[inline(never)]
fn lists_eq<'a, N: Node<'a>>(x: N::Items, y: N::Items, items: Option<Place>) -> bool {
    crate::nesting::guarded(|| lists_eq_unguarded::<N>(x, y, items))
}

fn lists_eq_unguarded<'a, N: Node<'a>>(x: N::Items, y: N::Items, items: Option<Place>) -> bool {
    let (mut x, mut y) = (x, y);
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if value_eq_at(a, b, items) => {}
            _ => return false,
        }
    }
}

/// Equality after normalisation: absent entries ignored, numbers compared by exact value.
///
/// Small and inlined so that the leaves of a map or list compare inside its loop; the
/// containers recurse through the out-of-line `maps_eq` and `lists_eq`.
#[inline]
pub fn value_eq<'a, N: Node<'a>>(a: N, b: N) -> bool {
    value_eq_at(a, b, None)
}

/// [`value_eq`] of two values at `place` in a kind's table of omitted zeros: an entry one side
/// lacks is also absent when it is a zero the kind leaves out.
#[inline]
pub(crate) fn value_eq_at<'a, N: Node<'a>>(a: N, b: N, place: Option<Place>) -> bool {
    if a.identical(b) {
        return true;
    }
    match (a.shape(), b.shape()) {
        (Shape::Object, Shape::Object) => match (a.as_map(), b.as_map()) {
            (Some(x), Some(y)) => maps_eq(&x, &y, place),
            _ => false,
        },
        (Shape::Array, Shape::Array) => match (a.items(), b.items()) {
            (Some(x), Some(y)) => lists_eq::<N>(x, y, place.and_then(Place::items)),
            _ => false,
        },
        (x, y) if x == y => a.scalar_eq(b),
        // `{}` and `[]` also compare equal to `null` when they meet inside a list.
        _ => a.is_absent() && b.is_absent(),
    }
}

#[cfg(test)]
mod tests;
