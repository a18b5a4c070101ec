//! A deliberately plain second implementation of reference §3 step 6 and §4, written from the text
//! alone and sharing no code with the engine's matcher or diff: the oracle of the differential
//! property test.
//!
//! Where the engine reports a change at the highest node it can (an added map key whole) and
//! descends only where a `mutable` pattern needs it, the model breaks every difference into its
//! *atoms* — a changed scalar, a whole added or removed list element, a list whose kept elements
//! changed order — and decides each by the literal sentence of §4: a pattern covers a path when
//! it matches the path or any ancestor of it. The two are equivalent exactly when every engine
//! report stands for at least one uncovered atom below it and every uncovered atom lies under an
//! engine report (see `main.rs`).

use serde_json::{Map, Value};

/// One step of a concrete path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// One step of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatSeg {
    Key(String),
    AnyKey,
    Index(usize),
    AnyIndex,
}

pub type Path = Vec<Seg>;
pub type Pattern = Vec<PatSeg>;

/// The rule's comparison settings, as data.
#[derive(Debug, Clone, Default)]
pub struct Scoping {
    pub include: Vec<Pattern>,
    pub exclude: Vec<Pattern>,
    pub mutable: Vec<Pattern>,
}

/// "`*` is one map key; `[*]` one list index."
fn step_matches(pattern: &PatSeg, segment: &Seg) -> bool {
    match (pattern, segment) {
        (PatSeg::Key(a), Seg::Key(b)) => a == b,
        (PatSeg::AnyKey, Seg::Key(_)) => true,
        (PatSeg::Index(a), Seg::Index(b)) => a == b,
        (PatSeg::AnyIndex, Seg::Index(_)) => true,
        _ => false,
    }
}

/// The pattern names exactly this path.
fn matches_exactly(pattern: &Pattern, path: &[Seg]) -> bool {
    pattern.len() == path.len() && pattern.iter().zip(path).all(|(p, s)| step_matches(p, s))
}

/// "A pattern covers a changed path when it matches the path or any ancestor of it."
pub fn covers(pattern: &Pattern, path: &[Seg]) -> bool {
    (0..=path.len()).any(|end| matches_exactly(pattern, &path[..end]))
}

/// The pattern is longer than `path` and matches it as far as `path` goes: it reaches below.
fn reaches_below(pattern: &Pattern, path: &[Seg]) -> bool {
    pattern.len() > path.len() && pattern.iter().zip(path).all(|(p, s)| step_matches(p, s))
}

fn any_covers(patterns: &[Pattern], path: &[Seg]) -> bool {
    patterns.iter().any(|p| covers(p, path))
}

/// Step 6: the node at `path` itself takes part in the comparison — inside an `include`
/// subtree (when there are any) and inside no `exclude` subtree.
fn in_scope(scoping: &Scoping, path: &[Seg]) -> bool {
    (scoping.include.is_empty() || any_covers(&scoping.include, path))
        && !any_covers(&scoping.exclude, path)
}

/// The node and everything below it take part: in scope, and no `exclude` reaches below it.
fn wholly_in_scope(scoping: &Scoping, path: &[Seg]) -> bool {
    in_scope(scoping, path) && !scoping.exclude.iter().any(|p| reaches_below(p, path))
}

/// The implicit system fields of step 6, and the bypass annotation, removed from a copy.
pub fn strip_system_fields(object: &Value, bypass: &str) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in [
                "managedFields",
                "resourceVersion",
                "generation",
                "uid",
                "creationTimestamp",
                "selfLink",
            ] {
                metadata.remove(key);
            }
            if let Some(annotations) = metadata
                .get_mut("annotations")
                .and_then(Value::as_object_mut)
            {
                annotations.remove(bypass);
            }
        }
    }
    object
}

/// A field the objects' kind leaves out when it holds its zero (§4), and that zero.
pub type OmittedZero = (Pattern, Value);

/// §4's zeros the API server leaves out: every map entry at a path of `omitted` that holds
/// that field's zero is dropped, before [`normalise`] drops what that leaves empty.
pub fn drop_omitted_zeros(value: &Value, omitted: &[OmittedZero], path: &mut Path) -> Value {
    match value {
        Value::Object(map) => {
            let mut kept = Map::new();
            for (key, entry) in map {
                path.push(Seg::Key(key.clone()));
                let zero = omitted
                    .iter()
                    .any(|(field, zero)| matches_exactly(field, path) && is_zero(entry, zero));
                if !zero {
                    kept.insert(key.clone(), drop_omitted_zeros(entry, omitted, path));
                }
                path.pop();
            }
            Value::Object(kept)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    path.push(Seg::Index(index));
                    let item = drop_omitted_zeros(item, omitted, path);
                    path.pop();
                    item
                })
                .collect(),
        ),
        scalar => scalar.clone(),
    }
}

/// `value` is `zero`: `false`, `""`, or a number of value 0 however it is written.
fn is_zero(value: &Value, zero: &Value) -> bool {
    match zero {
        Value::Number(_) => number_text(value).is_some() && same(value, zero),
        _ => value == zero,
    }
}

/// §4 normalisation: map entries whose value is `null`, `{}` or `[]` are dropped, bottom-up.
/// Returns `None` for a value that is absent as a whole.
pub fn normalise(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Object(map) => {
            let kept: Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| normalise(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(items) if items.is_empty() => None,
        // List elements are not map entries: they stay, normalised inside.
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .map(|item| normalise(item).unwrap_or(Value::Null))
                .collect(),
        )),
        scalar => Some(scalar.clone()),
    }
}

/// A number written as its JSON text, for numbers a `Value` cannot hold exactly (beyond 64-bit
/// integers, decimals past a double's precision, texts that are not a double's shortest form):
/// a string with this prefix. The test writes it into the review as the bare number.
pub const NUMBER_MARK: &str = "\u{1}number:";

/// The number a value is, as JSON text: a marked string's text, or a parsed number's exact
/// value (a double written out in full, not in its shortest form).
fn number_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => s.strip_prefix(NUMBER_MARK).map(str::to_owned),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64()?;
            // Rust prints a double with a given precision exactly; 1,100 places hold any.
            Some(if f.fract() == 0.0 {
                format!("{f:.0}")
            } else {
                format!("{f:.1100}")
            })
        }
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A number's exact value, canonical: sign, significant digits, and the power of ten of the
/// last digit (`0` for zero, either sign). Written from the JSON grammar alone.
fn exact(text: &str) -> (bool, String, i64) {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (
            &rest[..at],
            rest[at + 1..].parse::<i64>().expect("exponent"),
        ),
        None => (rest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let mut power = exponent - fraction.len() as i64;
    let trimmed_end = digits.trim_end_matches('0');
    power += (digits.len() - trimmed_end.len()) as i64;
    let significant = trimmed_end.trim_start_matches('0');
    if significant.is_empty() {
        return (false, "0".to_owned(), 0);
    }
    (negative, significant.to_owned(), power)
}

/// Whether every marked number of `value` keeps its exact value when serde_json parses it.
pub fn parses_exactly(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().all(parses_exactly),
        Value::Array(items) => items.iter().all(parses_exactly),
        Value::String(s) => s.strip_prefix(NUMBER_MARK).is_none_or(|text| {
            serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|parsed| number_text(&parsed))
                .is_some_and(|parsed| exact(&parsed) == exact(text))
        }),
        _ => true,
    }
}

/// Numbers compare by exact value; everything else structurally (values are normalised).
fn same(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (number_text(a), number_text(b)) {
        return exact(&x) == exact(&y);
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

fn is_scalar(value: &Value) -> bool {
    !matches!(value, Value::Object(_) | Value::Array(_) | Value::Null)
}

/// The smallest unit of difference the model judges.
#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    /// A scalar that is on one side only, or differs from the other side.
    Scalar(Path),
    /// A list element added or removed (or changed in type at a kept position), judged whole
    /// ("no descent into an added or removed list element"); the element's values on the side
    /// or sides it is on.
    Element(Path, Vec<Value>),
    /// A list whose kept elements changed their relative order.
    Order(Path),
}

impl Atom {
    pub fn path(&self) -> &Path {
        match self {
            Atom::Scalar(p) | Atom::Element(p, _) | Atom::Order(p) => p,
        }
    }
}

/// Every atom of difference between two normalised objects; alignment is decided here, on the
/// objects before `include`/`exclude`, as §4 says.
pub fn atoms(
    scoping: &Scoping,
    old: Option<&Value>,
    new: Option<&Value>,
    path: &mut Path,
    out: &mut Vec<Atom>,
) {
    match (old, new) {
        (None, None) => {}
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().collect();
            keys.extend(b.keys().filter(|k| !a.contains_key(*k)));
            for key in keys {
                path.push(Seg::Key(key.clone()));
                atoms(scoping, a.get(key), b.get(key), path, out);
                path.pop();
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => list_atoms(scoping, a, b, path, out),
        (Some(a), Some(b)) if is_scalar(a) && is_scalar(b) => {
            if !same(a, b) {
                out.push(Atom::Scalar(path.clone()));
            }
        }
        // A list element that appears, disappears or changes type at a kept position: "no
        // descent" below a list index — judged whole, like an added or removed element.
        (old, new) if matches!(path.last(), Some(Seg::Index(_))) => {
            let sides = [old, new].into_iter().flatten().cloned().collect();
            out.push(Atom::Element(path.clone(), sides));
        }
        // A map key added, removed, or of another type: each side broken into its own atoms
        // (§4 descends into it, as far as a `mutable` pattern needs). "Missing side = absent":
        // where a deeper `mutable` pattern reaches below a retyped key, a scalar on the other
        // side counts as absent.
        (old, new) => {
            let retyped = old.is_some() && new.is_some();
            let descends = scoping.mutable.iter().any(|p| reaches_below(p, path));
            for side in [old, new].into_iter().flatten() {
                if retyped && descends && is_scalar(side) {
                    continue;
                }
                one_side_atoms(side, path, out);
            }
        }
    }
}

fn one_side_atoms(value: &Value, path: &mut Path, out: &mut Vec<Atom>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                path.push(Seg::Key(key.clone()));
                one_side_atoms(child, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(Seg::Index(index));
                out.push(Atom::Element(path.clone(), vec![item.clone()]));
                path.pop();
            }
        }
        Value::Null => {}
        _ => out.push(Atom::Scalar(path.clone())),
    }
}

/// The merge key of §4 for a list, by the list's own field name first.
fn merge_key_of(list_name: Option<&str>, a: &[Value], b: &[Value]) -> Option<Vec<&'static str>> {
    let all: Vec<&Value> = a.iter().chain(b).collect();
    if !all.iter().all(|v| v.is_object()) {
        return None;
    }
    Some(match list_name {
        Some("volumeMounts") => vec!["mountPath"],
        Some("volumeDevices") => vec!["devicePath"],
        Some("hostAliases") => vec!["ip"],
        Some("ports") if all.iter().all(|v| v.get("containerPort").is_some()) => {
            vec!["containerPort", "protocol"]
        }
        Some("ports") => vec!["port", "protocol"],
        _ => vec!["name"],
    })
}

/// An element's key as text, or `None` when it lacks it. A missing or empty `protocol` is `TCP`.
fn key_of(fields: &[&str], element: &Value) -> Option<String> {
    let mut parts = Vec::new();
    for field in fields {
        let part = match (*field, element.get(*field)) {
            ("protocol", None) => "TCP".to_owned(),
            ("protocol", Some(Value::String(s))) if s.is_empty() => "TCP".to_owned(),
            ("containerPort" | "port", Some(port)) => format!("{:?}", exact(&number_text(port)?)),
            (_, Some(Value::String(s))) if !s.starts_with(NUMBER_MARK) => s.clone(),
            _ => return None,
        };
        parts.push(part);
    }
    Some(parts.join("/"))
}

/// Keys of every element, when each has one and none repeats.
fn unique_keys(fields: &[&str], items: &[Value]) -> Option<Vec<String>> {
    let keys: Vec<String> = items
        .iter()
        .map(|item| key_of(fields, item))
        .collect::<Option<_>>()?;
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    (sorted.len() == keys.len()).then_some(keys)
}

/// Which old element corresponds to which new one: (old index, new index) in new order, then
/// the removed old indices and the added new indices.
type Alignment = (Vec<(usize, usize)>, Vec<usize>, Vec<usize>);

fn align(list_name: Option<&str>, a: &[Value], b: &[Value]) -> Alignment {
    let keyed = merge_key_of(list_name, a, b)
        .and_then(|fields| Some((unique_keys(&fields, a)?, unique_keys(&fields, b)?)));
    match keyed {
        Some((old_keys, new_keys)) => {
            let kept = new_keys
                .iter()
                .enumerate()
                .filter_map(|(j, k)| old_keys.iter().position(|o| o == k).map(|i| (i, j)))
                .collect();
            let removed = (0..a.len())
                .filter(|&i| !new_keys.contains(&old_keys[i]))
                .collect();
            let added = (0..b.len())
                .filter(|&j| !old_keys.contains(&new_keys[j]))
                .collect();
            (kept, removed, added)
        }
        None => {
            let shared = a.len().min(b.len());
            (
                (0..shared).map(|i| (i, i)).collect(),
                (shared..a.len()).collect(),
                (shared..b.len()).collect(),
            )
        }
    }
}

fn list_atoms(scoping: &Scoping, a: &[Value], b: &[Value], path: &mut Path, out: &mut Vec<Atom>) {
    let list_name = match path.last() {
        Some(Seg::Key(k)) => Some(k.clone()),
        _ => None,
    };
    let (kept, removed, added) = align(list_name.as_deref(), a, b);
    // A reordering counts when the kept elements that have something in scope (on either
    // side) changed their relative order.
    let scoped_old_order: Vec<usize> = kept
        .iter()
        .filter(|&&(i, j)| {
            element_in_scope(scoping, &a[i], path, i) || element_in_scope(scoping, &b[j], path, j)
        })
        .map(|&(i, _)| i)
        .collect();
    if scoped_old_order.windows(2).any(|w| w[1] < w[0]) {
        out.push(Atom::Order(path.clone()));
    }
    for &(i, j) in &kept {
        path.push(Seg::Index(j));
        let (x, y) = (normalise(&a[i]), normalise(&b[j]));
        atoms(scoping, x.as_ref(), y.as_ref(), path, out);
        path.pop();
    }
    for &i in &removed {
        path.push(Seg::Index(i));
        out.push(Atom::Element(path.clone(), vec![a[i].clone()]));
        path.pop();
    }
    for &j in &added {
        path.push(Seg::Index(j));
        out.push(Atom::Element(path.clone(), vec![b[j].clone()]));
        path.pop();
    }
}

fn element_in_scope(scoping: &Scoping, element: &Value, list: &Path, index: usize) -> bool {
    let mut path = list.clone();
    path.push(Seg::Index(index));
    has_content_in_scope(scoping, element, &mut path)
}

/// Whether anything of `value`, sitting at `path`, is in scope.
fn has_content_in_scope(scoping: &Scoping, value: &Value, path: &mut Path) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| {
            path.push(Seg::Key(k.clone()));
            let found = has_content_in_scope(scoping, v, path);
            path.pop();
            found
        }),
        // A list element exists even when its value is empty: wholly in scope, it is content.
        Value::Array(items) => items.iter().enumerate().any(|(i, v)| {
            path.push(Seg::Index(i));
            let found = wholly_in_scope(scoping, path) || has_content_in_scope(scoping, v, path);
            path.pop();
            found
        }),
        Value::Null => false,
        _ => in_scope(scoping, path),
    }
}

/// The judged atoms of one update: those in scope, each with whether `mutable` covers it.
pub fn judge(
    old: &Value,
    new: &Value,
    bypass: &str,
    omitted: &[OmittedZero],
    scoping: &Scoping,
) -> Vec<(Path, bool)> {
    let read = |object: &Value| {
        let object = drop_omitted_zeros(object, omitted, &mut Vec::new());
        normalise(&strip_system_fields(&object, bypass))
    };
    let (old, new) = (read(old), read(new));
    let mut found = Vec::new();
    atoms(
        scoping,
        old.as_ref(),
        new.as_ref(),
        &mut Vec::new(),
        &mut found,
    );
    let mut judged = Vec::new();
    for atom in found {
        let counts = match &atom {
            Atom::Scalar(path) => in_scope(scoping, path),
            // An element exists even when its value is empty: wholly in scope it counts as it
            // is; partly in scope, when something of it is.
            Atom::Element(path, sides) => {
                wholly_in_scope(scoping, path)
                    || sides
                        .iter()
                        .any(|side| has_content_in_scope(scoping, side, &mut path.clone()))
            }
            // Decided when the atom was found.
            Atom::Order(_) => true,
        };
        if counts {
            let path = atom.path().clone();
            let mutable = any_covers(&scoping.mutable, &path);
            judged.push((path, mutable));
        }
    }
    judged
}
