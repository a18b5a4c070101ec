//! The `kubectl edit` experience without applying anything: the live object, cleaned of what the
//! API server manages, is opened in the user's editor; what is saved is previewed.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use drift_engine::manifests;
use drift_engine::rule::SYSTEM_FIELDS;
use serde_json::Value;

/// What the user did in the editor.
pub(crate) enum Edited {
    /// The saved object, changed.
    Object(Value),
    /// Nothing to preview, and why (as kubectl says it).
    Cancelled(&'static str),
}

const HEADER: &str = "\
# Edit the object below, then save and quit: kubectl drift shows what Drift Sentinel would
# answer to this update. NOTHING IS APPLIED. Lines beginning with a '#' are ignored; an empty
# file, or no change, cancels.
#
";

/// The live object as the editor shows it: without `status` and the metadata the API server
/// manages (`managedFields`, `resourceVersion`, `uid`, …: the fields no rule compares).
pub(crate) fn cleaned(live: &Value) -> Value {
    let mut object = live.clone();
    for field in SYSTEM_FIELDS {
        let mut path: Vec<&str> = field.split('.').collect();
        let Some(last) = path.pop() else { continue };
        let parent = path
            .iter()
            .try_fold(&mut object, |value, segment| value.get_mut(*segment));
        if let Some(Value::Object(map)) = parent {
            map.remove(last);
        }
    }
    object
}

/// The editor as kubectl picks and starts it: `KUBE_EDITOR`, `EDITOR`, else `vi`; a command
/// with spaces is split on them, one with quotes or backslashes is run by `$SHELL -c`; the
/// file's path is the last argument.
fn editor_command(path: &Path) -> (String, Command) {
    let editor = ["KUBE_EDITOR", "EDITOR"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    let command = if !editor.contains(' ') {
        let mut command = Command::new(&editor);
        command.arg(path);
        command
    } else if !editor.contains(['"', '\'', '\\']) {
        let mut words = editor.split(' ').filter(|w| !w.is_empty());
        let mut command = Command::new(words.next().unwrap_or("vi"));
        command.args(words).arg(path);
        command
    } else {
        let shell = std::env::var("SHELL")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/bin/bash".to_owned());
        let quoted = format!("'{}'", path.display().to_string().replace('\'', r"'\''"));
        let mut command = Command::new(shell);
        command.arg("-c").arg(format!("{editor} {quoted}"));
        command
    };
    (editor, command)
}

/// Opens `object` (already cleaned) in the editor and reads back what was saved.
pub(crate) fn edit(object: &Value, what: &str) -> anyhow::Result<Edited> {
    let file = tempfile::Builder::new()
        .prefix("kubectl-drift-edit-")
        .suffix(".yaml")
        .tempfile()
        .context("cannot create the file to edit")?;
    let text = format!("{HEADER}{}", serde_yaml::to_string(object)?);
    std::fs::write(file.path(), text)
        .with_context(|| format!("cannot write {}", file.path().display()))?;
    let (editor, mut command) = editor_command(file.path());
    let status = command.status().with_context(|| {
        format!("cannot start the editor {editor:?} (set KUBE_EDITOR or EDITOR)")
    })?;
    if !status.success() {
        bail!("the editor {editor:?} failed ({status}); nothing was previewed");
    }
    let saved = std::fs::read_to_string(file.path())
        .with_context(|| format!("cannot read the edited {what} back"))?;
    let documents = match manifests::parse_documents(&saved, "the edited object") {
        Ok(documents) => documents,
        Err(e) => {
            let (_, kept) = file.keep().context("cannot keep the edited file")?;
            bail!(
                "{e}; a copy of your changes has been stored to {}",
                kept.display()
            );
        }
    };
    match documents.as_slice() {
        [] => Ok(Edited::Cancelled("Edit cancelled, saved file was empty.")),
        [edited] if edited == object => Ok(Edited::Cancelled("Edit cancelled, no changes made.")),
        [edited] if edited.is_object() => Ok(Edited::Object(edited.clone())),
        _ => {
            let (_, kept) = file.keep().context("cannot keep the edited file")?;
            bail!(
                "the edited file must hold exactly one object, the {what}; a copy of your changes has been stored to {}",
                kept.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cleaning_drops_what_the_server_manages() {
        let live = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod", "resourceVersion": "7", "uid": "u",
                "generation": 2, "creationTimestamp": "t", "managedFields": [{}], "labels": {"a": "b"}},
            "spec": {"replicas": 1},
            "status": {"replicas": 1}
        });
        assert_eq!(
            cleaned(&live),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "prod", "labels": {"a": "b"}},
                "spec": {"replicas": 1}})
        );
    }
}
