//! Generators for the differential test: objects shaped like real workloads, random edits of
//! them, and rule patterns drawn from the objects' own paths.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value, json};

use crate::model::{NUMBER_MARK, PatSeg, Path, Pattern, Scoping, Seg};

/// Number texts in groups of near twins: texts that a double cannot tell apart (integers past
/// 64 bits and past 2^53, decimals past a double's precision) and texts of one value in other
/// words (integer/float pairs). A number edit mostly swaps a number for a twin.
const NUMBER_GROUPS: &[&[&str]] = &[
    &[
        "18446744073709551616",
        "18446744073709551617",
        "18446744073709551616.0",
        "1.8446744073709551616e19",
    ],
    &["-18446744073709551617", "-18446744073709551616"],
    &["9007199254740993", "9007199254740992", "9007199254740992.0"],
    &[
        "123456789012345678901234567890",
        "1.2345678901234567890123456789e29",
        "123456789012345678901234567891",
    ],
    &[
        "0.1",
        "0.10000000000000000001",
        "0.1000000000000000055511151231257827021181583404541015625",
    ],
    &["1", "1.0", "1e0", "2"],
    &["100", "1e2", "100.000000000000000001"],
    &["0", "-0.0", "0e5"],
];

/// A number as its text (see [`NUMBER_MARK`]): the `pick`th of the whole table.
fn number(pick: usize) -> Value {
    let all: Vec<&str> = NUMBER_GROUPS
        .iter()
        .flat_map(|g| g.iter().copied())
        .collect();
    marked(all[pick % all.len()])
}

fn marked(text: &str) -> Value {
    json!(format!("{NUMBER_MARK}{text}"))
}

/// Another number for `text`: mostly a twin from its group, sometimes any.
fn twin(text: &str, pick: u8) -> Value {
    match NUMBER_GROUPS.iter().find(|g| g.contains(&text)) {
        Some(group) if !pick.is_multiple_of(4) => {
            let at = group.iter().position(|t| *t == text).unwrap_or(0);
            marked(group[(at + 1 + usize::from(pick) % (group.len() - 1)) % group.len()])
        }
        _ => number(usize::from(pick)),
    }
}

/// The same number in other words: `1` → `1.0`, `1.0` → `1.00`, `1e2` → `1.0e2`.
fn same_number_text(text: &str) -> String {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let mantissa = if mantissa.contains('.') {
        format!("{mantissa}0")
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}{exponent}")
}

/// Annotation and label keys, some of which need `['…']` in a pattern.
const KEYS: &[&str] = &[
    "app",
    "team",
    "example.com/owner",
    "kubectl.kubernetes.io/restartedAt",
    "deployment.kubernetes.io/revision",
    "it's",
    "a b",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0u8..4).prop_map(|n| json!(format!("v{n}"))),
        3 => (0i64..4).prop_map(|n| json!(n)),
        3 => any::<bool>().prop_map(|b| json!(b)),
        1 => any::<usize>().prop_map(number),
    ]
}

fn string_map() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(prop::sample::select(KEYS), "[a-c]{1,2}", 0..3).prop_map(|m| {
        Value::Object(
            m.into_iter()
                .map(|(k, v)| (k.to_owned(), json!(v)))
                .collect(),
        )
    })
}

fn container(name: String) -> impl Strategy<Value = Value> {
    (
        "[a-c]{1,2}:v[0-9]",
        prop::collection::vec(scalar(), 0..3),
        prop::collection::vec(("[A-C]{1,2}", scalar()), 0..3),
        prop::collection::vec(
            (prop::sample::select(&[80i64, 443, 8080][..]), any::<bool>()),
            0..3,
        ),
        prop::option::of(("[1-4]00m", "[1-2]Gi")),
        prop::collection::vec(
            prop::sample::select(&["/data", "/cache", "/etc/conf"][..]),
            0..3,
        ),
    )
        .prop_map(move |(image, args, env, ports, resources, mounts)| {
            let mut c = Map::new();
            c.insert("name".into(), json!(name));
            c.insert("image".into(), json!(image));
            if !args.is_empty() {
                c.insert("args".into(), Value::Array(args));
            }
            if !env.is_empty() {
                // Repeated names are kept on purpose: such a list aligns by index.
                let env: Vec<Value> = env
                    .into_iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect();
                c.insert("env".into(), Value::Array(env));
            }
            if !ports.is_empty() {
                let ports: Vec<Value> = ports
                    .into_iter()
                    .map(|(port, udp)| match udp {
                        true => json!({"containerPort": port, "protocol": "UDP"}),
                        false => json!({"containerPort": port}),
                    })
                    .collect();
                c.insert("ports".into(), Value::Array(ports));
            }
            if let Some((cpu, memory)) = resources {
                c.insert(
                    "resources".into(),
                    json!({"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": "100m"}}),
                );
            }
            if !mounts.is_empty() {
                let mounts: Vec<Value> = mounts
                    .into_iter()
                    .enumerate()
                    .map(|(i, path)| json!({"name": format!("vol{i}"), "mountPath": path}))
                    .collect();
                c.insert("volumeMounts".into(), Value::Array(mounts));
            }
            Value::Object(c)
        })
}

/// A Deployment-like object with system fields, annotations, a pod template with containers,
/// volumes and scalar lists.
pub fn workload() -> impl Strategy<Value = Value> {
    (
        string_map(),
        string_map(),
        0i64..5,
        prop::collection::vec(container("app".into()), 1..2),
        prop::option::of(container("sidecar".into())),
        prop::collection::vec("[a-c]{1,3}", 0..3),
        prop::option::of("[a-c]{2}"),
        string_map(),
        any::<usize>(),
    )
        .prop_map(
            |(
                labels,
                annotations,
                replicas,
                mut containers,
                sidecar,
                volumes,
                sa,
                node_selector,
                min_ready,
            )| {
                containers.extend(sidecar);
                let volumes: Vec<Value> = volumes
                    .into_iter()
                    .map(|n| json!({"name": n, "emptyDir": {}}))
                    .collect();
                json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {
                        "name": "web", "namespace": "prod",
                        "labels": labels, "annotations": annotations,
                        "resourceVersion": "10", "generation": 3, "uid": "u-1",
                        "managedFields": [{"manager": "kubectl", "operation": "Update"}]
                    },
                    "spec": {
                        "replicas": replicas,
                        "minReadySeconds": number(min_ready),
                        "selector": {"matchLabels": {"app": "web"}},
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                        "template": {
                            "metadata": {"labels": {"app": "web"}, "annotations": annotations},
                            "spec": {
                                "containers": containers,
                                "volumes": volumes,
                                "serviceAccountName": sa,
                                "nodeSelector": node_selector,
                                "tolerations": []
                            }
                        }
                    },
                    "status": {"replicas": replicas, "observedGeneration": 2}
                })
            },
        )
}

/// One random edit: which node (an index into every node of the object) and what to do there.
#[derive(Debug, Clone)]
pub struct Edit {
    at: Index,
    kind: EditKind,
    fresh: u8,
}

#[derive(Debug, Clone, Copy)]
enum EditKind {
    /// A scalar in place of whatever was there (a scalar change or a type change).
    SetScalar,
    /// A number rewritten in other words (an integer as the equal float): no change.
    SameNumber,
    /// A number in place of a number (mostly its twin, see [`NUMBER_GROUPS`]), or of anything when the object has none.
    SetNumber,
    /// `null`, `{}` or `[]`: absent.
    SetAbsent,
    Remove,
    AddKey,
    InsertElement,
    Swap,
    /// A scalar wrapped into a map or a list: a type change.
    Wrap,
}

pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let kind = prop_oneof![
        4 => Just(EditKind::SetScalar),
        1 => Just(EditKind::SameNumber),
        2 => Just(EditKind::SetNumber),
        2 => Just(EditKind::SetAbsent),
        2 => Just(EditKind::Remove),
        2 => Just(EditKind::AddKey),
        2 => Just(EditKind::InsertElement),
        2 => Just(EditKind::Swap),
        1 => Just(EditKind::Wrap),
    ];
    prop::collection::vec(
        (any::<Index>(), kind, any::<u8>()).prop_map(|(at, kind, fresh)| Edit { at, kind, fresh }),
        1..4,
    )
}

/// Every node below the root, as a path, in document order.
pub fn node_paths(value: &Value) -> Vec<Path> {
    fn walk(value: &Value, path: &mut Path, out: &mut Vec<Path>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    path.push(Seg::Key(k.clone()));
                    out.push(path.clone());
                    walk(v, path, out);
                    path.pop();
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    out.push(path.clone());
                    walk(v, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, &mut Vec::new(), &mut out);
    out
}

fn node_at<'v>(value: &'v Value, path: &[Seg]) -> Option<&'v Value> {
    path.iter().try_fold(value, |at, segment| match segment {
        Seg::Key(k) => at.get(k),
        Seg::Index(i) => at.get(*i),
    })
}

fn is_number(value: &Value) -> bool {
    value.is_number() || value.as_str().is_some_and(|s| s.starts_with(NUMBER_MARK))
}

fn node_mut<'v>(value: &'v mut Value, path: &[Seg]) -> Option<&'v mut Value> {
    let mut at = value;
    for segment in path {
        at = match segment {
            Seg::Key(k) => at.get_mut(k)?,
            Seg::Index(i) => at.get_mut(*i)?,
        };
    }
    Some(at)
}

pub fn apply(object: &Value, edits: &[Edit]) -> Value {
    let mut new = object.clone();
    for edit in edits {
        let paths = node_paths(&new);
        if paths.is_empty() {
            break;
        }
        // A number edit goes to a number when there is one, so that twins meet.
        let numbers: Vec<Path> = match edit.kind {
            EditKind::SetNumber => paths
                .iter()
                .filter(|p| node_at(&new, p).is_some_and(is_number))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        let candidates = if numbers.is_empty() { &paths } else { &numbers };
        let path = edit.at.get(candidates).clone();
        apply_one(&mut new, &path, edit);
    }
    new
}

fn apply_one(root: &mut Value, path: &[Seg], edit: &Edit) {
    let fresh = edit.fresh;
    let (parent_path, last) = path.split_at(path.len() - 1);
    match edit.kind {
        EditKind::Remove => {
            let Some(parent) = node_mut(root, parent_path) else {
                return;
            };
            match (&last[0], parent) {
                (Seg::Key(k), Value::Object(map)) => {
                    map.shift_remove(k);
                }
                (Seg::Index(i), Value::Array(items)) if *i < items.len() => {
                    items.remove(*i);
                }
                _ => {}
            }
            return;
        }
        EditKind::Swap => {
            // Swap two elements of the list this node is in (or of this list).
            let target = match &last[0] {
                Seg::Index(_) => parent_path,
                Seg::Key(_) => path,
            };
            if let Some(Value::Array(items)) = node_mut(root, target)
                && items.len() >= 2
            {
                let a = usize::from(fresh) % items.len();
                let b = (a + 1 + usize::from(fresh / 7) % (items.len() - 1)) % items.len();
                items.swap(a, b);
            }
            return;
        }
        _ => {}
    }
    let Some(node) = node_mut(root, path) else {
        return;
    };
    match edit.kind {
        EditKind::SetScalar => {
            *node = match fresh % 4 {
                0 => json!(format!("v{}", fresh % 5)),
                1 => json!(i64::from(fresh % 5)),
                2 => json!(fresh.is_multiple_of(2)),
                _ => json!(format!("x{fresh}")),
            }
        }
        EditKind::SameNumber => {
            if let Some(n) = node.as_i64() {
                *node = json!(n as f64);
            } else if let Some(text) = node.as_str().and_then(|s| s.strip_prefix(NUMBER_MARK)) {
                *node = json!(format!("{NUMBER_MARK}{}", same_number_text(text)));
            }
        }
        EditKind::SetNumber => {
            *node = match node.as_str().and_then(|s| s.strip_prefix(NUMBER_MARK)) {
                Some(text) => twin(text, fresh),
                None => number(usize::from(fresh)),
            }
        }
        EditKind::SetAbsent => {
            *node = match fresh % 3 {
                0 => Value::Null,
                1 => json!({}),
                _ => json!([]),
            }
        }
        EditKind::AddKey => {
            if let Value::Object(map) = node {
                let key = KEYS[usize::from(fresh) % KEYS.len()];
                let value = match fresh % 3 {
                    0 => json!(format!("n{fresh}")),
                    1 => json!({"a": fresh % 3, "b": {"c": "d"}}),
                    _ => json!([fresh % 3, "s"]),
                };
                map.insert(key.to_owned(), value);
            }
        }
        EditKind::InsertElement => {
            if let Value::Array(items) = node
                && !items.is_empty()
            {
                let mut element = items[usize::from(fresh) % items.len()].clone();
                // Mostly a fresh key; sometimes a repeated one, which makes the list align by
                // index.
                if !fresh.is_multiple_of(5) {
                    for key in ["name", "mountPath"] {
                        if let Some(v) = element.get_mut(key) {
                            *v = json!(format!("new{fresh}"));
                        }
                    }
                    if let Some(v) = element.get_mut("containerPort") {
                        *v = json!(9000 + i64::from(fresh));
                    }
                }
                if !element.is_object() {
                    element = json!(format!("e{fresh}"));
                }
                let at = usize::from(fresh) % (items.len() + 1);
                items.insert(at, element);
            }
        }
        EditKind::Wrap => {
            if !node.is_object() && !node.is_array() {
                let inner = node.take();
                *node = match fresh % 2 {
                    0 => json!({"value": inner}),
                    _ => json!([inner]),
                };
            }
        }
        EditKind::Remove | EditKind::Swap => unreachable!("handled above"),
    }
}

/// How a pattern is made from a node path of the objects.
#[derive(Debug, Clone)]
pub struct PatternPick {
    at: Index,
    transform: Transform,
}

#[derive(Debug, Clone, Copy)]
enum Transform {
    AsIs,
    /// Cut to a shorter prefix.
    Prefix(u8),
    /// One more step past the node (past a scalar, too).
    Extend(u8),
    /// Some steps replaced by `*` / `[*]` (bit i of the mask: step i).
    Wildcards(u8),
    /// Every index replaced by `[*]`.
    AnyIndex,
}

pub fn pattern_picks(max: usize) -> impl Strategy<Value = Vec<PatternPick>> {
    let transform = prop_oneof![
        2 => Just(Transform::AsIs),
        2 => any::<u8>().prop_map(Transform::Prefix),
        2 => any::<u8>().prop_map(Transform::Extend),
        2 => any::<u8>().prop_map(Transform::Wildcards),
        3 => Just(Transform::AnyIndex),
    ];
    prop::collection::vec(
        (any::<Index>(), transform).prop_map(|(at, transform)| PatternPick { at, transform }),
        0..=max,
    )
}

fn to_pattern(path: &Path, transform: Transform) -> Pattern {
    let mut pattern: Pattern = path
        .iter()
        .map(|s| match s {
            Seg::Key(k) => PatSeg::Key(k.clone()),
            Seg::Index(i) => PatSeg::Index(*i),
        })
        .collect();
    match transform {
        Transform::AsIs => {}
        Transform::Prefix(n) => {
            let keep = pattern.len() - usize::from(n) % pattern.len();
            pattern.truncate(keep.max(1));
        }
        Transform::Extend(n) => pattern.push(match n % 4 {
            0 => PatSeg::Key("x".into()),
            1 => PatSeg::AnyKey,
            2 => PatSeg::AnyIndex,
            _ => PatSeg::Index(0),
        }),
        Transform::Wildcards(mask) => {
            for (i, step) in pattern.iter_mut().enumerate() {
                if i < 8 && mask & (1 << i) != 0 {
                    *step = match step {
                        PatSeg::Key(_) | PatSeg::AnyKey => PatSeg::AnyKey,
                        PatSeg::Index(_) | PatSeg::AnyIndex => PatSeg::AnyIndex,
                    };
                }
            }
        }
        Transform::AnyIndex => {
            for step in pattern.iter_mut() {
                if let PatSeg::Index(_) = step {
                    *step = PatSeg::AnyIndex;
                }
            }
        }
    }
    pattern
}

/// Patterns drawn from the nodes of both objects.
pub fn patterns(picks: &[PatternPick], old: &Value, new: &Value) -> Vec<Pattern> {
    let mut paths = node_paths(old);
    paths.extend(node_paths(new));
    if paths.is_empty() {
        return Vec::new();
    }
    picks
        .iter()
        .map(|pick| to_pattern(pick.at.get(&paths), pick.transform))
        .collect()
}

/// A pattern in the rule language: bare keys joined by `.`, other keys as `['…']`.
pub fn render(pattern: &Pattern) -> String {
    let mut out = String::new();
    for step in pattern {
        match step {
            PatSeg::Key(k)
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PatSeg::Key(k) => {
                out.push_str("['");
                for c in k.chars() {
                    if c == '\'' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push_str("']");
            }
            PatSeg::AnyKey => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('*');
            }
            PatSeg::Index(i) => out.push_str(&format!("[{i}]")),
            PatSeg::AnyIndex => out.push_str("[*]"),
        }
    }
    out
}

/// One generated case.
#[derive(Debug, Clone)]
pub struct Case {
    pub old: Value,
    pub new: Value,
    pub scoping: Scoping,
}

pub fn case() -> impl Strategy<Value = Case> {
    (
        workload(),
        edits(),
        prop::option::weighted(0.25, pattern_picks(2)),
        pattern_picks(2),
        pattern_picks(3),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(old, edits, include, exclude, mutable, partial_spec)| {
            let new = apply(&old, &edits);
            let mut exclude = patterns(&exclude, &old, &new);
            if partial_spec {
                // `spec.*.metadata`: `spec` partly in scope, so what changes in it is compared
                // in part (the projection), numbers included.
                exclude.push(vec![
                    PatSeg::Key("spec".into()),
                    PatSeg::AnyKey,
                    PatSeg::Key("metadata".into()),
                ]);
            }
            let scoping = Scoping {
                include: include
                    .map(|p| patterns(&p, &old, &new))
                    .unwrap_or_default(),
                exclude,
                mutable: patterns(&mutable, &old, &new),
            };
            Case { old, new, scoping }
        })
}
