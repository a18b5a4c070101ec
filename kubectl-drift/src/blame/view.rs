//! What `kubectl drift blame` shows of one object, built from the object, the engine's audit of
//! it and the engine's attribution of its drifted fields ([`blame`]), and its text ([`text`]).
//! Pure: nothing here reads the cluster or judges anything itself.

use std::fmt::Write as _;

use drift_api::blame::{
    Blame, BlamedField, ChangedBy, FieldDrift, MAX_BLAMED_FIELDS, MAX_BLAMED_PATH_CHARS,
    MAX_BLAMED_VALUE_CHARS, Owner,
};
use drift_engine::apply::LAST_APPLIED_ANNOTATION;
use drift_engine::attribution::{Evidence, attribute_drift};
use drift_engine::json::LazyValue;
use drift_engine::managed::{self, OwnedField};
use drift_engine::message::MAX_DETAILED_CHANGES;
use drift_engine::truncate::{truncate_bytes, truncate_chars};
use drift_engine::{Audit, FieldPath, Mode, PathSegment};
use serde_json::Value;

use crate::render::Style;

/// The metadata fields shown: what a manifest declares (the API server's own are left out).
const SHOWN_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];
/// Top-level fields never shown: the object's type, its metadata (but [`SHOWN_METADATA`]) and
/// its status (what controllers report, not what anyone declares).
const HIDDEN_TOP_LEVEL: &[&str] = &["apiVersion", "kind", "metadata", "status"];
/// The most bytes of the audit's reason kept.
const MAX_REASON_BYTES: usize = 1024;

/// The blame of `object`: each field and its owner, and — when `audit` (the engine's audit of
/// it; `None` when no auditing rule selects it) finds drift — each drifted field with who made
/// it and why, joined with `evidence` (the webhook's records; `None` when not read).
pub(super) fn blame(
    object: &Value,
    audit: Option<&Audit<'_>>,
    evidence: Option<&Evidence<'_>>,
    notes: Vec<String>,
) -> Blame {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let owned = managed::owned_leaves(object);
    let drifted: Vec<_> = audit
        .map(|a| a.changes().iter().filter(|c| !c.mutable).collect())
        .unwrap_or_default();
    let who: Vec<_> = match (audit, evidence) {
        (Some(audit), Some(evidence)) if audit.is_drifted() => {
            attribute_drift(object, audit.changes(), evidence, MAX_DETAILED_CHANGES)
        }
        _ => Vec::new(),
    };
    let (fields, fields_omitted) = leaves(object);
    let mut rows: Vec<BlamedField> = fields
        .iter()
        .map(|(path, value)| BlamedField {
            path: truncate_chars(&path.to_string(), MAX_BLAMED_PATH_CHARS),
            value: Some(shown(Some(&LazyValue::from(*value)))),
            owner: managed::leaf_owner(&owned, path.segments()).map(owner),
            drifted: drifted
                .iter()
                .any(|c| path.segments().starts_with(c.change.path.segments())),
        })
        .collect();
    // A drifted path no field is under: removed, or under a field that is now a leaf.
    for change in &drifted {
        let covered = fields
            .iter()
            .any(|(path, _)| path.segments().starts_with(change.change.path.segments()));
        if !covered && rows.len() < MAX_BLAMED_FIELDS {
            rows.push(BlamedField {
                path: truncate_chars(&change.path, MAX_BLAMED_PATH_CHARS),
                value: change.change.new.as_ref().map(|v| shown(Some(v))),
                owner: owner_of(&owned, change.change.path.segments()),
                drifted: true,
            });
        }
    }
    let drift = drifted
        .iter()
        .take(MAX_DETAILED_CHANGES)
        .map(|change| FieldDrift {
            path: truncate_chars(&change.path, MAX_BLAMED_PATH_CHARS),
            declared: change.change.old.as_ref().map(|v| shown(Some(v))),
            declared_unknown: change.declared_unknown && change.change.old.is_none(),
            live: change.change.new.as_ref().map(|v| shown(Some(v))),
            changed_by: change.edit.as_ref().map(|edit| ChangedBy {
                manager: edit.manager.to_string(),
                time: edit.time.as_ref().map(|t| t.to_string()),
            }),
            owner: owner_of(&owned, change.change.path.segments()),
            who: who
                .iter()
                .find(|(c, _)| c.change.path == change.change.path)
                .map(|(_, attributed)| attributed.attribution.clone()),
        })
        .collect();
    Blame {
        api_version: text("/apiVersion"),
        kind: text("/kind"),
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
        uid: text("/metadata/uid"),
        result: audit.map_or("not-audited", Audit::result_label).to_owned(),
        reason: match audit {
            Some(audit) => truncate_bytes(&audit.reason(), MAX_REASON_BYTES),
            None => "no rule in mode enforce, warn or dry-run selects this object: its drift is not judged".to_owned(),
        },
        rule: audit.and_then(Audit::rule).map(|r| r.id.to_string()),
        mode: audit.and_then(Audit::mode).map(|m| m.as_str().to_owned()),
        last_applied: object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
            .is_some_and(Value::is_string),
        fields: rows,
        fields_omitted,
        drift,
        drift_omitted: drifted.len().saturating_sub(MAX_DETAILED_CHANGES) as u64,
        notes,
    }
}

/// A value as compact JSON, cut to [`MAX_BLAMED_VALUE_CHARS`].
fn shown(value: Option<&LazyValue<'_>>) -> String {
    value.map_or_else(
        || "<absent>".to_owned(),
        |v| v.shown(MAX_BLAMED_VALUE_CHARS),
    )
}

fn owner(field: &OwnedField<'_>) -> Owner {
    Owner {
        manager: field.manager.to_owned(),
        operation: field.operation.to_owned(),
        subresource: field.subresource.map(str::to_owned),
        time: field.time.map(str::to_owned),
    }
}

/// The owner of a path that may be a whole (a list element): its own, else the latest owning a
/// part of it.
fn owner_of(owned: &[OwnedField<'_>], path: &[PathSegment]) -> Option<Owner> {
    managed::leaf_owner(owned, path)
        .or_else(|| managed::owner_of(owned, path))
        .map(owner)
}

/// The shown leaves of `object` in its order (scalars, and empty maps and lists; a value nested
/// deeper than [`MAX_DEPTH`] is one leaf), at most [`MAX_BLAMED_FIELDS`], and how many more
/// there are. Iterative, one path reused: no depth makes it recurse or copy paths per level.
fn leaves(object: &Value) -> (Vec<(FieldPath, &Value)>, u64) {
    let mut stack: Vec<(usize, PathSegment, &Value)> = Vec::new();
    if let Some(map) = object.as_object() {
        for (key, value) in map.iter().rev() {
            if key == "metadata" {
                for name in SHOWN_METADATA.iter().rev() {
                    if let Some(value) = value.get(*name) {
                        stack.push((1, PathSegment::Key((*name).to_owned()), value));
                        stack.push((0, PathSegment::Key("metadata".to_owned()), &NULL));
                    }
                }
            } else if !HIDDEN_TOP_LEVEL.contains(&key.as_str()) {
                stack.push((0, PathSegment::Key(key.clone()), value));
            }
        }
    }
    let mut path: Vec<PathSegment> = Vec::new();
    let mut found = Vec::new();
    let mut omitted = 0u64;
    while let Some((depth, segment, value)) = stack.pop() {
        path.truncate(depth);
        path.push(segment);
        // `metadata` itself: only a step towards the shown metadata fields.
        if depth == 0 && value.is_null() && path[0] == PathSegment::Key("metadata".to_owned()) {
            continue;
        }
        match value {
            Value::Object(map) if !map.is_empty() && depth < MAX_DEPTH => {
                for (key, child) in map.iter().rev() {
                    stack.push((depth + 1, PathSegment::Key(key.clone()), child));
                }
            }
            Value::Array(items) if !items.is_empty() && depth < MAX_DEPTH => {
                for (index, child) in items.iter().enumerate().rev() {
                    stack.push((depth + 1, PathSegment::Index(index), child));
                }
            }
            _ if found.len() < MAX_BLAMED_FIELDS => {
                found.push((FieldPath::from(path.clone()), value));
            }
            _ => omitted += 1,
        }
    }
    (found, omitted)
}

static NULL: Value = Value::Null;

/// Deeper values are shown whole (cut): real objects nest a few dozen levels.
const MAX_DEPTH: usize = 64;

/// Column widths' bounds in the text: longer cells are cut with `…`.
const MANAGER_WIDTH: usize = 32;
const OPERATION_WIDTH: usize = 16;
const TIME_WIDTH: usize = 25;
const FIELD_WIDTH: usize = 72;
const VALUE_WIDTH: usize = 48;

/// `-o text`: a heading (the object, the audit's result, rule and mode, the baseline), one line
/// per field (`!` marks drift) — manager, operation, time, field, value — then each drifted
/// path: declared → live, the edit that changed it, who made it and why; then the notes.
pub(super) fn text(blame: &Blame, style: &Style) -> String {
    let mut out = String::new();
    let object = match blame.namespace.as_str() {
        "" => format!("{} {}", blame.kind, blame.name),
        namespace => format!("{} {namespace}/{}", blame.kind, blame.name),
    };
    let judged = match (&blame.rule, &blame.mode) {
        (Some(rule), Some(mode)) => format!(" (rule {rule}, mode {mode})"),
        _ => String::new(),
    };
    let baseline = if blame.last_applied {
        "declared: the last-applied-configuration annotation (client-side apply)"
    } else {
        "declared: no last-applied-configuration annotation (server-side apply or none): only fields imperative edits own are compared"
    };
    let _ = writeln!(
        out,
        "{}: {}{judged}\n{baseline}",
        style.bold(&object),
        blame.result
    );
    let paint = |text: &str| match blame.mode.as_deref() {
        Some(mode) if mode == Mode::Enforce.as_str() => style.red(text),
        _ => style.yellow(text),
    };
    let cells: Vec<[String; 5]> = blame
        .fields
        .iter()
        .map(|field| {
            let owner = field.owner.as_ref();
            [
                cut(owner.map_or("", |o| &o.manager), MANAGER_WIDTH),
                cut(
                    &owner.map_or_else(String::new, |o| match &o.subresource {
                        Some(sub) => format!("{}/{sub}", o.operation),
                        None => o.operation.clone(),
                    }),
                    OPERATION_WIDTH,
                ),
                cut(
                    owner.and_then(|o| o.time.as_deref()).unwrap_or(""),
                    TIME_WIDTH,
                ),
                cut(&field.path, FIELD_WIDTH),
                cut(field.value.as_deref().unwrap_or("<absent>"), VALUE_WIDTH),
            ]
        })
        .collect();
    let header = ["MANAGER", "OPERATION", "TIME", "FIELD", "VALUE"];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |out: &mut String, mark: &str, row: [&str; 5]| {
        let mut text = String::new();
        for (i, cell) in row.iter().enumerate().take(4) {
            let pad = widths[i].saturating_sub(cell.chars().count());
            let _ = write!(text, "{cell}{}  ", " ".repeat(pad));
        }
        text.push_str(row[4]);
        let _ = writeln!(out, "{mark} {}", text.trim_end());
    };
    out.push('\n');
    line(&mut out, " ", header);
    for (field, row) in blame.fields.iter().zip(&cells) {
        let row = [&*row[0], &*row[1], &*row[2], &*row[3], &*row[4]];
        if field.drifted {
            let mut marked = String::new();
            line(&mut marked, "!", row);
            out.push_str(&paint(marked.trim_end_matches('\n')));
            out.push('\n');
        } else {
            line(&mut out, " ", row);
        }
    }
    if blame.fields_omitted > 0 {
        let _ = writeln!(out, "  … and {} more fields", blame.fields_omitted);
    }
    if !blame.drift.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            paint(&format!(
                "drift from the declared state: {} field{}",
                blame.drift.len() as u64 + blame.drift_omitted,
                if blame.drift.len() as u64 + blame.drift_omitted == 1 {
                    ""
                } else {
                    "s"
                }
            ))
        );
    }
    for drift in &blame.drift {
        let declared = match (&drift.declared, drift.declared_unknown) {
            (Some(value), _) => value.as_str(),
            (None, true) => "<unknown>",
            (None, false) => "<absent>",
        };
        let _ = writeln!(
            out,
            "! {}: declared {declared}, live {}",
            drift.path,
            drift.live.as_deref().unwrap_or("<absent>")
        );
        if let Some(edit) = &drift.changed_by {
            let _ = writeln!(
                out,
                "    changed by {}",
                at(&edit.manager, edit.time.as_deref())
            );
        }
        if let Some(owner) = &drift.owner {
            let _ = writeln!(
                out,
                "    owned by {} ({})",
                at(&owner.manager, owner.time.as_deref()),
                owner.operation
            );
        }
        if let Some(who) = &drift.who {
            let _ = writeln!(out, "    who: {who}");
        }
    }
    if blame.drift_omitted > 0 {
        let _ = writeln!(out, "  … and {} more drifted paths", blame.drift_omitted);
    }
    if blame.result != "drifted" {
        let _ = writeln!(out, "\n{}", blame.reason);
    }
    for note in &blame.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// `manager at time`, or the manager alone.
fn at(manager: &str, time: Option<&str>) -> String {
    match time {
        Some(time) => format!("{manager} at {time}"),
        None => manager.to_owned(),
    }
}

fn cut(text: &str, width: usize) -> String {
    truncate_chars(text, width)
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
