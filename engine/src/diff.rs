//! The structural diff of two objects (SPEC §4).
//!
//! The diff walks both objects at once and never copies them: the implicit system fields,
//! `exclude` subtrees and the bypass annotation are simply not visited, and `include` limits
//! the walk to its subtrees. Lists are aligned by merge key the way strategic merge patch does,
//! decided on the whole (unscoped) elements so that scoping never changes which elements
//! correspond. `null`, an absent key, `{}` and `[]` are all "absent".

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::path::{AsSegment, FieldPath, PathPattern, PathSegment, SegmentRef};

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

    /// SPEC §4 subtree semantics: a pattern takes part at a path when it matches the path or
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

/// One changed path with the values on each side (absent sides are `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct Change<'a> {
    pub path: FieldPath,
    pub kind: ChangeKind,
    pub old: Option<Cow<'a, Value>>,
    pub new: Option<Cow<'a, Value>>,
}

/// Diffs `old` against `new` within `scope`. `descend` are the patterns (a rule's `mutable`)
/// that make the diff look inside an added, removed or retyped map instead of reporting it
/// whole, so that only the parts they do not cover are reported.
pub fn diff<'a>(
    old: &'a Value,
    new: &'a Value,
    scope: &Scope,
    descend: &[PathPattern],
) -> Vec<Change<'a>> {
    let mut walker = Walker {
        scope,
        descend,
        path: Vec::with_capacity(16),
        changes: Vec::new(),
    };
    let coverage = scope.coverage::<SegmentRef<'_>>(&[]);
    match (old, new) {
        // The root is always compared key by key, even when it is empty.
        (Value::Object(a), Value::Object(b)) if coverage != Coverage::Out => {
            walker.walk_maps(Some(a), Some(b), coverage)
        }
        _ => walker.walk(Some(old), Some(new), coverage),
    }
    walker.changes
}

/// The part of `value`, found at `path`, that `scope` compares; `None` when nothing of it is.
/// For the audit's changes that do not come out of [`diff`] (fields owned by an imperative
/// edit), so that they are scoped exactly as the diff scopes its own.
pub fn scoped_value<'a>(
    scope: &Scope,
    path: &'a FieldPath,
    value: &'a Value,
) -> Option<Cow<'a, Value>> {
    let segments: Vec<SegmentRef<'a>> = path.segments().iter().map(|s| s.as_segment()).collect();
    let coverage = scope.coverage(&segments);
    let mut walker = Walker {
        scope,
        descend: &[],
        path: segments,
        changes: Vec::new(),
    };
    walker.scoped(value, coverage)
}

/// Walks both objects at once. The path is kept as borrowed keys, so visiting a node costs no
/// allocation; a path is copied only when a change is recorded.
struct Walker<'s, 'a> {
    scope: &'s Scope,
    descend: &'s [PathPattern],
    path: Vec<SegmentRef<'a>>,
    changes: Vec<Change<'a>>,
}

impl<'a> Walker<'_, 'a> {
    fn walk(&mut self, old: Option<&'a Value>, new: Option<&'a Value>, coverage: Coverage) {
        if coverage == Coverage::Out {
            return;
        }
        // Two scalars: the common leaf, settled without the absence tests below.
        if let (Some(a), Some(b)) = (old, new)
            && is_scalar(a)
            && is_scalar(b)
        {
            if !value_eq(a, b) {
                self.changed_node(old, new, coverage);
            }
            return;
        }
        let old = present(old);
        let new = present(new);
        match (old, new) {
            (None, None) => {}
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                self.walk_maps(Some(a), Some(b), coverage)
            }
            (Some(Value::Array(a)), Some(Value::Array(b))) => {
                // Aligning costs more than comparing: align only lists that differ.
                if let Some(first) = first_difference(a, b) {
                    self.walk_lists(a, b, first, coverage)
                }
            }
            (Some(a), Some(b)) if value_eq(a, b) => {}
            _ => self.changed_node(old, new, coverage),
        }
    }

    fn walk_maps(
        &mut self,
        old: Option<&'a Map<String, Value>>,
        new: Option<&'a Map<String, Value>>,
        coverage: Coverage,
    ) {
        for_each_key(old, new, |key, old_value, new_value| {
            // Most nodes are unchanged scalars: settle them without the bookkeeping of a walk.
            if let (Some(a), Some(b)) = (old_value, new_value)
                && is_scalar(a)
                && is_scalar(b)
                && value_eq(a, b)
            {
                return;
            }
            self.path.push(SegmentRef::Key(key));
            let child = self.scope.child_coverage(coverage, &self.path);
            self.walk(old_value, new_value, child);
            self.path.pop();
        });
    }

    /// Walks two lists that differ; the elements before `first_difference` are known equal.
    fn walk_lists(
        &mut self,
        old: &'a [Value],
        new: &'a [Value],
        first_difference: usize,
        coverage: Coverage,
    ) {
        let field = match self.path.last() {
            Some(SegmentRef::Key(key)) => Some(*key),
            _ => None,
        };
        if old.len() == new.len() && aligns_by_position(field, old, new) {
            // Every element keeps its place: no reordering, nothing added or removed. Equal
            // elements are settled by comparison, cheaper than a walk.
            for (index, (old_item, new_item)) in old.iter().zip(new).enumerate() {
                if index < first_difference
                    || (index > first_difference && value_eq(old_item, new_item))
                {
                    continue;
                }
                self.path.push(SegmentRef::Index(index));
                let child = self.scope.child_coverage(coverage, &self.path);
                self.walk(Some(old_item), Some(new_item), child);
                self.path.pop();
            }
            return;
        }
        let alignment = align(field, old, new);

        // Order of kept elements (by new index): a decrease in old index means reordering.
        // Under partial coverage only elements that have something in scope count.
        let mut last_old = None;
        let mut reordered = false;
        for &(old_index, new_index) in &alignment.kept {
            if coverage.is_partial() {
                let in_scope = self.has_scoped_content(&old[old_index], old_index)
                    || self.has_scoped_content(&new[new_index], new_index);
                if !in_scope {
                    continue;
                }
            }
            if last_old.is_some_and(|last| old_index < last) {
                reordered = true;
                break;
            }
            last_old = Some(old_index);
        }
        if reordered {
            let (old_value, new_value) = match coverage {
                Coverage::InExceptBelow | Coverage::OnlyBelow => (
                    self.project_list(old, coverage).map(Cow::Owned),
                    self.project_list(new, coverage).map(Cow::Owned),
                ),
                _ => (
                    Some(Cow::Owned(Value::Array(old.to_vec()))),
                    Some(Cow::Owned(Value::Array(new.to_vec()))),
                ),
            };
            self.record(ChangeKind::Reordered, old_value, new_value);
        }

        for &(old_index, new_index) in &alignment.kept {
            self.path.push(SegmentRef::Index(new_index));
            let child = self.scope.child_coverage(coverage, &self.path);
            self.walk(Some(&old[old_index]), Some(&new[new_index]), child);
            self.path.pop();
        }
        for &index in &alignment.removed {
            self.whole_element(index, Some(&old[index]), None, coverage);
        }
        for &index in &alignment.added {
            self.whole_element(index, None, Some(&new[index]), coverage);
        }
    }

    /// An added or removed list element: reported whole at its index, never descended into.
    fn whole_element(
        &mut self,
        index: usize,
        old: Option<&'a Value>,
        new: Option<&'a Value>,
        coverage: Coverage,
    ) {
        self.path.push(SegmentRef::Index(index));
        let child = self.scope.child_coverage(coverage, &self.path);
        if child != Coverage::Out {
            // An element exists even when its value is empty: under full coverage it is
            // reported as it is; under partial coverage only if something of it is in scope.
            let element = |walker: &mut Self, v: &'a Value| match child {
                Coverage::In => Some(Cow::Borrowed(v)),
                _ => walker.scoped(v, child),
            };
            let old_value = old.and_then(|v| element(self, v));
            let new_value = new.and_then(|v| element(self, v));
            if old_value.is_some() || new_value.is_some() {
                let kind = if new.is_some() {
                    ChangeKind::Added
                } else {
                    ChangeKind::Removed
                };
                self.record(kind, old_value, new_value);
            }
        }
        self.path.pop();
    }

    /// A node whose value was added, removed, changed type or changed as a scalar.
    fn changed_node(&mut self, old: Option<&'a Value>, new: Option<&'a Value>, coverage: Coverage) {
        let at_map_key = matches!(self.path.last(), Some(SegmentRef::Key(_)));
        if at_map_key && self.wants_descent() {
            // Descend into the container(s); a side of another type counts as absent. A list
            // is descended to its elements, which are then reported whole at their index.
            let (old_map, new_map) = (
                old.and_then(Value::as_object),
                new.and_then(Value::as_object),
            );
            let (old_list, new_list) =
                (old.and_then(Value::as_array), new.and_then(Value::as_array));
            if old_map.is_some() || new_map.is_some() {
                self.walk_maps(old_map, new_map, coverage);
            }
            if old_list.is_some() || new_list.is_some() {
                let (old_items, new_items) = (
                    old_list.map_or(&[][..], Vec::as_slice),
                    new_list.map_or(&[][..], Vec::as_slice),
                );
                let first = first_difference(old_items, new_items).unwrap_or(0);
                self.walk_lists(old_items, new_items, first, coverage);
            }
            if old_map.is_some() || new_map.is_some() || old_list.is_some() || new_list.is_some() {
                // SPEC §4: "descends into it (missing side = absent)" — a scalar on the other
                // side of a retyped key counts as absent; only the container's parts are judged.
                return;
            }
        }
        let old_value = old.and_then(|v| self.scoped(v, coverage));
        let new_value = new.and_then(|v| self.scoped(v, coverage));
        let kind = match (&old_value, &new_value) {
            (None, None) => return,
            (Some(a), Some(b)) if value_eq(a, b) => return,
            (None, Some(_)) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Removed,
            (Some(_), Some(_)) => ChangeKind::Modified,
        };
        self.record(kind, old_value, new_value);
    }

    /// A deeper descent pattern reaches below this path and none covers the path itself.
    fn wants_descent(&self) -> bool {
        self.descend.iter().any(|p| p.reaches_below(&self.path))
            && !self.descend.iter().any(|p| p.covers(&self.path))
    }

    fn record(
        &mut self,
        kind: ChangeKind,
        old: Option<Cow<'a, Value>>,
        new: Option<Cow<'a, Value>>,
    ) {
        let path: Vec<PathSegment> = self.path.iter().map(|&s| PathSegment::from(s)).collect();
        self.changes.push(Change {
            path: FieldPath::from(path),
            kind,
            old,
            new,
        });
    }

    /// The part of `value` (at the current path) that is in scope; `None` when nothing is.
    fn scoped(&mut self, value: &'a Value, coverage: Coverage) -> Option<Cow<'a, Value>> {
        match coverage {
            Coverage::Out => None,
            Coverage::In => present(Some(value)).map(Cow::Borrowed),
            Coverage::InExceptBelow | Coverage::OnlyBelow => {
                self.project(value, coverage).map(Cow::Owned)
            }
        }
    }

    fn has_scoped_content(&mut self, element: &'a Value, index: usize) -> bool {
        self.path.push(SegmentRef::Index(index));
        let coverage = self.scope.coverage(&self.path);
        let found = self.scoped(element, coverage).is_some();
        self.path.pop();
        found
    }

    /// Copies the in-scope part of `value` at the current path. Used only for values that are
    /// reported whole under partial coverage, which is rare; the common path never copies.
    fn project(&mut self, value: &'a Value, coverage: Coverage) -> Option<Value> {
        match coverage {
            Coverage::Out => None,
            Coverage::In => present(Some(value)).cloned(),
            Coverage::InExceptBelow | Coverage::OnlyBelow => match value {
                Value::Object(map) => {
                    let mut out = Map::new();
                    for (key, child_value) in map {
                        self.path.push(SegmentRef::Key(key));
                        let child = self.scope.coverage(&self.path);
                        if let Some(projected) = self.project(child_value, child) {
                            out.insert(key.clone(), projected);
                        }
                        self.path.pop();
                    }
                    (!out.is_empty()).then_some(Value::Object(out))
                }
                Value::Array(items) => self.project_list(items, coverage),
                Value::Null => None,
                // A scalar has no descendants: it is compared exactly when the node itself is.
                scalar => (coverage == Coverage::InExceptBelow).then(|| scalar.clone()),
            },
        }
    }

    fn project_list(&mut self, items: &'a [Value], coverage: Coverage) -> Option<Value> {
        let mut any = false;
        let mut out = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            self.path.push(SegmentRef::Index(index));
            let child = self.scope.child_coverage(coverage, &self.path);
            let projected = self.project(item, child);
            self.path.pop();
            any |= projected.is_some();
            out.push(projected.unwrap_or(Value::Null));
        }
        any.then_some(Value::Array(out))
    }
}

/// Calls `f` once per key of either map with each side's value.
///
/// Two versions of one object nearly always carry the same keys in the same order (the API
/// server serialises both from the same types, and serde_json keeps that order here), so the
/// maps are walked side by side while their keys agree; from the first disagreement on, keys
/// are looked up instead.
fn for_each_key<'a>(
    old: Option<&'a Map<String, Value>>,
    new: Option<&'a Map<String, Value>>,
    mut f: impl FnMut(&'a str, Option<&'a Value>, Option<&'a Value>),
) {
    let (old, new) = match (old, new) {
        (Some(old), Some(new)) => (old, new),
        (Some(old), None) => return old.iter().for_each(|(k, v)| f(k, Some(v), None)),
        (None, Some(new)) => return new.iter().for_each(|(k, v)| f(k, None, Some(v))),
        (None, None) => return,
    };
    let mut shared = 0;
    for ((ka, va), (kb, vb)) in old.iter().zip(new) {
        if !str_eq(ka, kb) {
            break;
        }
        f(ka, Some(va), Some(vb));
        shared += 1;
    }
    if shared == old.len() && shared == new.len() {
        return;
    }
    for (key, value) in old.iter().skip(shared) {
        f(key, Some(value), new.get(key));
    }
    for (key, value) in new.iter().skip(shared) {
        if !old.contains_key(key) {
            f(key, None, Some(value));
        }
    }
}

/// Whether two maps are equal after normalisation, stopping at the first difference. Same
/// side-by-side walk as [`for_each_key`].
#[inline(never)]
fn maps_eq(x: &Map<String, Value>, y: &Map<String, Value>) -> bool {
    let mut shared = 0;
    for ((ka, va), (kb, vb)) in x.iter().zip(y) {
        if !str_eq(ka, kb) {
            break;
        }
        if !value_eq(va, vb) {
            return false;
        }
        shared += 1;
    }
    if shared == x.len() && shared == y.len() {
        return true;
    }
    let old_side_eq = x.iter().skip(shared).all(|(key, a)| match y.get(key) {
        Some(b) => value_eq(a, b),
        None => is_absent(a),
    });
    old_side_eq
        && y.iter()
            .skip(shared)
            .all(|(key, b)| x.contains_key(key) || is_absent(b))
}

/// `value[key]` for an object: a scan for the small maps of Kubernetes objects (no hashing),
/// a hashed lookup for large ones.
#[inline]
pub fn field<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    let map = value.as_object()?;
    if map.len() <= 12 {
        map.iter().find(|(k, _)| str_eq(k, key)).map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

/// String equality tuned for the short keys and values of Kubernetes objects: strings up to 16
/// bytes are compared with two overlapping word loads instead of a library call.
#[inline]
fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    fn word8(s: &[u8], at: usize) -> u64 {
        s.get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(0, u64::from_ne_bytes)
    }
    fn word4(s: &[u8], at: usize) -> u32 {
        s.get(at..at + 4)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .map_or(0, u32::from_ne_bytes)
    }
    match n {
        0 => true,
        1..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

/// `None` for values that count as absent.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !is_absent(v))
}

/// `null`, `[]`, and maps whose every entry is absent (so `{}` too) are absent.
pub fn is_absent(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.values().all(is_absent),
        _ => false,
    }
}

fn is_scalar(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

/// The index of the first element pair that differs, or the shorter length when one list
/// extends the other; `None` when the lists are equal.
fn first_difference(x: &[Value], y: &[Value]) -> Option<usize> {
    match x.iter().zip(y).position(|(a, b)| !value_eq(a, b)) {
        Some(index) => Some(index),
        None if x.len() == y.len() => None,
        None => Some(x.len().min(y.len())),
    }
}

#[inline(never)]
fn lists_eq(x: &[Value], y: &[Value]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| value_eq(a, b))
}

/// Equality after normalisation: absent entries ignored, numbers compared numerically.
///
/// Small and inlined so that the leaves of a map or list compare inside its loop; the
/// containers recurse through the out-of-line `maps_eq` and `lists_eq`.
#[inline]
pub fn value_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => str_eq(x, y),
        (Value::Number(x), Value::Number(y)) => numbers_eq(x, y),
        (Value::Bool(x), Value::Bool(y)) => x == y,
        // `value_eq` itself treats absent values alike, so shared keys need no presence test.
        (Value::Object(x), Value::Object(y)) => maps_eq(x, y),
        (Value::Array(x), Value::Array(y)) => lists_eq(x, y),
        (Value::Null, Value::Null) => true,
        // `{}` and `[]` also compare equal to `null` when they meet inside a list.
        _ => is_absent(a) && is_absent(b),
    }
}

#[inline]
fn numbers_eq(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return a == b;
    }
    match (x.as_f64(), y.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Which old element corresponds to which new one.
#[derive(Debug, Default, PartialEq, Eq)]
struct Alignment {
    /// (old index, new index), in new-index order.
    kept: Vec<(usize, usize)>,
    removed: Vec<usize>,
    added: Vec<usize>,
}

/// The merge key of a list, decided by the list's own field name first (as strategic merge
/// patch does), then by `name`. Also what [`crate::apply`] merges lists by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MergeKey {
    Field(&'static str),
    /// `(containerPort | port, protocol)`, a missing protocol being TCP.
    Port(&'static str),
}

pub(crate) fn merge_key_for(
    list_name: Option<&str>,
    old: &[Value],
    new: &[Value],
) -> Option<MergeKey> {
    let all = || old.iter().chain(new.iter());
    if !all().all(Value::is_object) {
        return None;
    }
    let key = match list_name {
        Some("volumeMounts") => MergeKey::Field("mountPath"),
        Some("volumeDevices") => MergeKey::Field("devicePath"),
        Some("hostAliases") => MergeKey::Field("ip"),
        Some("ports") => {
            if all().all(|v| present(field(v, "containerPort")).is_some()) {
                MergeKey::Port("containerPort")
            } else {
                MergeKey::Port("port")
            }
        }
        _ => MergeKey::Field("name"),
    };
    Some(key)
}

pub(crate) fn element_key(key: MergeKey, element: &Value) -> Option<Cow<'_, str>> {
    match key {
        MergeKey::Field(name) => field(element, name)?.as_str().map(Cow::Borrowed),
        MergeKey::Port(name) => {
            let port = field(element, name)?.as_f64()?;
            // Keys are read as normalised (§4): an absent-like protocol is a missing one.
            let protocol = match present(field(element, "protocol")) {
                None => "TCP",
                Some(Value::String(p)) => p.as_str(),
                Some(_) => return None,
            };
            Some(Cow::Owned(format!("{port}/{protocol}")))
        }
    }
}

/// Whether two lists of the same length align element for element. True when each position
/// holds the same merge key on both sides: whether the list is then aligned by key (keys
/// unique) or by index (a key missing or repeated, on both sides alike), position `i` pairs
/// with position `i`. Decided without allocating.
fn aligns_by_position(list_name: Option<&str>, old: &[Value], new: &[Value]) -> bool {
    match merge_key_for(list_name, old, new) {
        None => true,
        Some(MergeKey::Field(name)) => old.iter().zip(new).all(|(a, b)| {
            field(a, name).and_then(Value::as_str) == field(b, name).and_then(Value::as_str)
        }),
        Some(MergeKey::Port(name)) => old
            .iter()
            .zip(new)
            .all(|(a, b)| port_key(a, name) == port_key(b, name)),
    }
}

/// `(port, protocol)` of a ports element, a missing protocol being TCP.
fn port_key<'v>(element: &'v Value, name: &str) -> (Option<f64>, Option<&'v str>) {
    let protocol = match present(field(element, "protocol")) {
        None => Some("TCP"),
        Some(p) => p.as_str(),
    };
    (field(element, name).and_then(Value::as_f64), protocol)
}

/// Lists up to this long are aligned by scanning instead of hashing: cheaper, no allocation
/// beyond the keys themselves.
const SCAN_ALIGN_MAX: usize = 16;

/// The merge key of every element, or `None` when one lacks it or one is repeated.
pub(crate) fn element_keys(key: MergeKey, items: &[Value]) -> Option<Vec<Cow<'_, str>>> {
    let keys: Vec<Cow<'_, str>> = items
        .iter()
        .map(|item| element_key(key, item))
        .collect::<Option<_>>()?;
    let unique = if keys.len() <= SCAN_ALIGN_MAX {
        (1..keys.len()).all(|i| !keys[..i].contains(&keys[i]))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(keys.len());
        keys.iter().all(|k| seen.insert(k.as_ref()))
    };
    unique.then_some(keys)
}

fn align(field: Option<&str>, old: &[Value], new: &[Value]) -> Alignment {
    if let Some(key) = merge_key_for(field, old, new)
        && let (Some(old_keys), Some(new_keys)) = (element_keys(key, old), element_keys(key, new))
    {
        let mut alignment = Alignment::default();
        if old.len() <= SCAN_ALIGN_MAX && new.len() <= SCAN_ALIGN_MAX {
            for (new_index, k) in new_keys.iter().enumerate() {
                match old_keys.iter().position(|o| o == k) {
                    Some(old_index) => alignment.kept.push((old_index, new_index)),
                    None => alignment.added.push(new_index),
                }
            }
            for (old_index, k) in old_keys.iter().enumerate() {
                if !new_keys.contains(k) {
                    alignment.removed.push(old_index);
                }
            }
        } else {
            let old_positions: HashMap<&str, usize> = old_keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.as_ref(), i))
                .collect();
            let new_positions: HashMap<&str, usize> = new_keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.as_ref(), i))
                .collect();
            for (new_index, k) in new_keys.iter().enumerate() {
                match old_positions.get(k.as_ref()) {
                    Some(&old_index) => alignment.kept.push((old_index, new_index)),
                    None => alignment.added.push(new_index),
                }
            }
            for (old_index, k) in old_keys.iter().enumerate() {
                if !new_positions.contains_key(k.as_ref()) {
                    alignment.removed.push(old_index);
                }
            }
        }
        return alignment;
    }
    let common = old.len().min(new.len());
    Alignment {
        kept: (0..common).map(|i| (i, i)).collect(),
        removed: (common..old.len()).collect(),
        added: (common..new.len()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn patterns(texts: &[&str]) -> Vec<PathPattern> {
        texts
            .iter()
            .map(|t| PathPattern::parse(t).unwrap())
            .collect()
    }

    fn changed_paths(old: &Value, new: &Value, scope: &Scope, descend: &[&str]) -> Vec<String> {
        let descend = patterns(descend);
        let mut paths: Vec<String> = diff(old, new, scope, &descend)
            .into_iter()
            .map(|c| c.path.to_string())
            .collect();
        paths.sort();
        paths
    }

    struct Case {
        name: &'static str,
        old: Value,
        new: Value,
        include: Option<&'static [&'static str]>,
        skip: &'static [&'static str],
        descend: &'static [&'static str],
        want: &'static [&'static str],
    }

    fn case(name: &'static str, old: Value, new: Value, want: &'static [&'static str]) -> Case {
        Case {
            name,
            old,
            new,
            include: None,
            skip: &[],
            descend: &[],
            want,
        }
    }

    fn run_cases(cases: Vec<Case>) {
        for case in cases {
            let scope = Scope::new(case.include.map(patterns), patterns(case.skip));
            let got = changed_paths(&case.old, &case.new, &scope, case.descend);
            let mut want: Vec<String> = case.want.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(got, want, "{}", case.name);
        }
    }

    #[test]
    fn diff_table() {
        let containers =
            |items: Value| json!({"spec": {"template": {"spec": {"containers": items}}}});
        let cases = vec![
            case("identical", json!({"a": 1}), json!({"a": 1}), &[]),
            case("scalar change", json!({"a": 1}), json!({"a": 2}), &["a"]),
            case(
                "added key",
                json!({"a": 1}),
                json!({"a": 1, "b": {"c": 1}}),
                &["b"],
            ),
            case(
                "removed key",
                json!({"a": 1, "b": 2}),
                json!({"a": 1}),
                &["b"],
            ),
            case("null equals absent", json!({"a": null}), json!({}), &[]),
            case("empty map equals absent", json!({"a": {}}), json!({}), &[]),
            case(
                "empty list equals absent",
                json!({"a": []}),
                json!({"a": null}),
                &[],
            ),
            case(
                "map emptied by nulls is absent",
                json!({"a": {"b": null, "c": {}}}),
                json!({}),
                &[],
            ),
            case(
                "empty map to filled map",
                json!({"a": {}}),
                json!({"a": {"x": 1}}),
                &["a"],
            ),
            case("type change", json!({"a": "1"}), json!({"a": 1}), &["a"]),
            case(
                "numbers compare numerically",
                json!({"a": 1}),
                json!({"a": 1.0}),
                &[],
            ),
            case(
                "big numbers",
                json!({"a": u64::MAX}),
                json!({"a": u64::MAX}),
                &[],
            ),
            case(
                "nested change",
                json!({"a": {"b": {"c": 1}}}),
                json!({"a": {"b": {"c": 2}}}),
                &["a.b.c"],
            ),
            case(
                "quoted key",
                json!({"m": {"a/b": 1}}),
                json!({"m": {"a/b": 2}}),
                &["m['a/b']"],
            ),
            case(
                "sidecar inserted at index 0",
                containers(json!([{"name": "app", "image": "a"}])),
                containers(
                    json!([{"name": "sidecar", "image": "s"}, {"name": "app", "image": "a"}]),
                ),
                &["spec.template.spec.containers[0]"],
            ),
            case(
                "change inside kept element reported at new index",
                containers(json!([{"name": "app", "image": "a"}])),
                containers(
                    json!([{"name": "sidecar", "image": "s"}, {"name": "app", "image": "b"}]),
                ),
                &[
                    "spec.template.spec.containers[0]",
                    "spec.template.spec.containers[1].image",
                ],
            ),
            case(
                "removed element at old index",
                containers(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
                containers(json!([{"name": "a"}, {"name": "c"}])),
                &["spec.template.spec.containers[1]"],
            ),
            case(
                "reordered kept elements report the list",
                containers(json!([{"name": "a"}, {"name": "b"}])),
                containers(json!([{"name": "b"}, {"name": "a"}])),
                &["spec.template.spec.containers"],
            ),
            case(
                "lists of scalars align by index",
                json!({"args": ["a", "b"]}),
                json!({"args": ["x", "a", "b"]}),
                &["args[0]", "args[1]", "args[2]"],
            ),
            case(
                "missing name aligns by index",
                json!({"items": [{"name": "a", "v": 1}, {"v": 2}]}),
                json!({"items": [{"v": 2}, {"name": "a", "v": 1}]}),
                &["items[0].name", "items[0].v", "items[1].name", "items[1].v"],
            ),
            case(
                "repeated name aligns by index",
                json!({"items": [{"name": "a", "v": 1}, {"name": "a", "v": 2}]}),
                json!({"items": [{"name": "a", "v": 1}, {"name": "a", "v": 3}]}),
                &["items[1].v"],
            ),
            case(
                "env keyed by name",
                json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}),
                json!({"env": [{"name": "X", "value": "0"}, {"name": "A", "value": "1"}, {"name": "B", "value": "3"}]}),
                &["env[0]", "env[2].value"],
            ),
            case(
                "volumeMounts keyed by mountPath",
                json!({"volumeMounts": [{"name": "data", "mountPath": "/a"}]}),
                json!({"volumeMounts": [{"name": "data", "mountPath": "/b"}]}),
                &["volumeMounts[0]", "volumeMounts[0]"],
            ),
            case(
                "volumeDevices keyed by devicePath",
                json!({"volumeDevices": [{"name": "d", "devicePath": "/dev/a"}]}),
                json!({"volumeDevices": [{"name": "e", "devicePath": "/dev/a"}]}),
                &["volumeDevices[0].name"],
            ),
            case(
                "hostAliases keyed by ip",
                json!({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}, {"ip": "10.0.0.2", "hostnames": ["b"]}]}),
                json!({"hostAliases": [{"ip": "10.0.0.2", "hostnames": ["b"]}]}),
                &["hostAliases[0]"],
            ),
            case(
                "container ports keyed by containerPort and protocol, TCP default",
                json!({"ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 53, "protocol": "UDP"}]}),
                json!({"ports": [{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 80, "protocol": "TCP", "name": "web"}]}),
                &["ports", "ports[1].name", "ports[1].protocol"],
            ),
            case(
                "service ports keyed by port",
                json!({"ports": [{"port": 80, "targetPort": 8080}]}),
                json!({"ports": [{"port": 443, "targetPort": 8443}, {"port": 80, "targetPort": 8081}]}),
                &["ports[0]", "ports[1].targetPort"],
            ),
            case(
                "same port, different protocol are different elements",
                json!({"ports": [{"containerPort": 53, "protocol": "TCP"}]}),
                json!({"ports": [{"containerPort": 53, "protocol": "UDP"}]}),
                &["ports[0]", "ports[0]"],
            ),
            case(
                "list element emptied stays positional",
                json!({"l": [{"a": null}]}),
                json!({"l": [{}]}),
                &[],
            ),
        ];
        run_cases(cases);
    }

    #[test]
    fn scope_table() {
        let dep = |image: &str, replicas: i64, extra: Value| {
            json!({
                "metadata": {"name": "x", "resourceVersion": "1", "annotations": extra},
                "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}},
                "status": {"ready": replicas}
            })
        };
        let cases = vec![
            Case {
                include: Some(&["spec.replicas"]),
                ..case(
                    "include keeps only its subtree",
                    dep("a", 1, json!({})),
                    dep("b", 2, json!({})),
                    &["spec.replicas"],
                )
            },
            Case {
                include: Some(&["spec.template"]),
                ..case(
                    "include of a subtree",
                    dep("a", 1, json!({})),
                    dep("b", 2, json!({})),
                    &["spec.template.spec.containers[0].image"],
                )
            },
            Case {
                skip: &["status", "spec.replicas"],
                ..case(
                    "skip removes subtrees",
                    dep("a", 1, json!({})),
                    dep("a", 2, json!({})),
                    &[],
                )
            },
            Case {
                skip: &["metadata.annotations['x']"],
                ..case(
                    "skipped key inside an added map",
                    dep("a", 1, json!(null)),
                    dep("a", 1, json!({"x": "1"})),
                    &[],
                )
            },
            Case {
                skip: &["metadata.annotations['x']"],
                ..case(
                    "added map keeps what is not skipped",
                    dep("a", 1, json!(null)),
                    dep("a", 1, json!({"x": "1", "y": "2"})),
                    &["metadata.annotations"],
                )
            },
            Case {
                include: Some(&["spec.template.spec.containers[*].image"]),
                ..case(
                    "added element under include is reported at its index",
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a", "args": ["1"]}]}}}}),
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s"}, {"name": "app", "image": "a", "args": ["2"]}]}}}}),
                    &["spec.template.spec.containers[0]"],
                )
            },
            Case {
                include: Some(&["spec.template.spec.containers[*].image"]),
                ..case(
                    "alignment is decided before scoping",
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "x"}]}}}}),
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "x"}]}}}}),
                    &["spec.template.spec.containers[0]"],
                )
            },
        ];
        run_cases(cases);
    }

    #[test]
    fn descent_table() {
        let cases = vec![
            Case {
                descend: &[
                    "spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']",
                ],
                ..case(
                    "descends into an added map",
                    json!({"spec": {"template": {"spec": {"x": 1}}}}),
                    json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}, "spec": {"x": 1}}}}),
                    &["spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']"],
                )
            },
            Case {
                descend: &[
                    "spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']",
                ],
                ..case(
                    "reports only what the pattern does not reach",
                    json!({"spec": {"template": {}}}),
                    json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now", "other": "x"}, "labels": {"a": "b"}}}}}),
                    &[
                        "spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt']",
                        "spec.template.metadata.annotations.other",
                        "spec.template.metadata.labels",
                    ],
                )
            },
            Case {
                descend: &["spec.template.spec.containers[*].image"],
                ..case(
                    "no descent into an added list element",
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a"}]}}}}),
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s"}, {"name": "app", "image": "a"}]}}}}),
                    &["spec.template.spec.containers[0]"],
                )
            },
            Case {
                descend: &["a.b"],
                ..case(
                    "descends into a retyped map, the scalar side absent",
                    json!({"a": "x"}),
                    json!({"a": {"b": 1}}),
                    &["a.b"],
                )
            },
            Case {
                descend: &["a"],
                ..case(
                    "no descent when the pattern covers the path",
                    json!({}),
                    json!({"a": {"b": 1}}),
                    &["a"],
                )
            },
        ];
        run_cases(cases);
    }

    #[test]
    fn change_values_are_reported() {
        let old = json!({"spec": {"replicas": 3}});
        let new = json!({"spec": {"replicas": 5}});
        let changes = diff(&old, &new, &Scope::everything(), &[]);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].kind, ChangeKind::Modified);
        assert_eq!(changes[0].old.as_deref(), Some(&json!(3)));
        assert_eq!(changes[0].new.as_deref(), Some(&json!(5)));
    }

    pub(crate) fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|n| json!(n)),
            "[a-z]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map("(name|image|[a-z]{1,4})", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn string_equality_at_every_length() {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789";
        for n in 0..text.len() {
            let a = &text[..n];
            assert!(str_eq(a, a.to_owned().as_str()), "{n}");
            for i in 0..n {
                let mut b = a.as_bytes().to_vec();
                b[i] = b'#';
                let b = String::from_utf8(b).unwrap();
                assert!(!str_eq(a, &b), "{n} {i}");
            }
            assert!(!str_eq(a, &text[..n + 1]));
        }
    }

    #[test]
    fn maps_in_any_key_order_compare_alike() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"x": 2, "y": null}, "c": 3}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"c": 3, "a": {"x": 2}, "b": 1}"#).unwrap();
        assert!(value_eq(&a, &b));
        assert!(diff(&a, &b, &Scope::everything(), &[]).is_empty());
        let c: Value = serde_json::from_str(r#"{"c": 4, "d": 1, "b": 1}"#).unwrap();
        let paths: Vec<String> = diff(&a, &c, &Scope::everything(), &[])
            .into_iter()
            .map(|change| change.path.to_string())
            .collect();
        assert_eq!(paths.len(), 3, "{paths:?}");
        for path in ["a", "c", "d"] {
            assert!(paths.contains(&path.to_owned()), "{paths:?}");
        }
    }

    proptest! {
        #[test]
        fn diff_of_an_object_with_itself_is_empty(value in arb_value()) {
            let object = json!({"spec": value});
            prop_assert!(diff(&object, &object.clone(), &Scope::everything(), &[]).is_empty());
        }

        #[test]
        fn diff_is_empty_exactly_when_values_are_equal(a in arb_value(), b in arb_value()) {
            let old = json!({"spec": a});
            let new = json!({"spec": b});
            let changes = diff(&old, &new, &Scope::everything(), &[]);
            prop_assert_eq!(changes.is_empty(), value_eq(&old, &new));
        }
    }
}
