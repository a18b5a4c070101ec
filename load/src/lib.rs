//! Drift Sentinel's inputs read from disk, for every program that reads them (the agent's rule
//! files and offline audit, the plugin's offline commands): the manifest files of a path — one
//! directory listing — and the objects of a file as `kubectl get -o yaml` writes them. The
//! engine parses what is read here ([`drift_engine::manifests`]); it does no I/O itself.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The extensions of rule, namespace and Connection files.
pub const YAML: &[&str] = &["yaml", "yml"];
/// The extensions of files of objects: YAML, or JSON as `kubectl get -o json` writes it.
pub const YAML_OR_JSON: &[&str] = &["yaml", "yml", "json"];

/// A path that could not be found, listed or read, or a file that could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0} does not exist")]
    Missing(PathBuf),
    // The io error is part of the message, not a `source` (an error chain would print it
    // twice).
    #[error("cannot list {path}: {error}")]
    List {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] drift_engine::manifests::ManifestError),
}

/// Whether `path` names a file this crate lists in a directory: not hidden, and with one of
/// `extensions`.
pub fn is_listed(path: &Path, extensions: &[&str]) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.')
        && path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e))
}

/// The files of a directory with one of `extensions` (not hidden ones, not directories), in
/// name order.
pub fn list_dir(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>, LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|error| LoadError::List {
        path: dir.to_owned(),
        error,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_listed(p, extensions) && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// The files `paths` name: each file as it is, and the listed files of each directory
/// ([`list_dir`]); a path that does not exist is an error naming it.
pub fn files(paths: &[PathBuf], extensions: &[&str]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            files.extend(list_dir(path, extensions)?);
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(LoadError::Missing(path.clone()));
        }
    }
    Ok(files)
}

/// A file's text.
pub fn read_text(file: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(file).map_err(|error| LoadError::Read {
        path: file.to_owned(),
        error,
    })
}

/// The documents of one file: YAML or JSON, several documents, `List`s (as `kubectl get -o
/// yaml` writes them) flattened into their items.
pub fn read_documents(file: &Path) -> Result<Vec<Value>, LoadError> {
    let text = read_text(file)?;
    Ok(drift_engine::manifests::parse_documents(
        &text,
        &file.display().to_string(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_directories_and_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "b.yaml",
            "a.json",
            "c.yml",
            ".hidden.yaml",
            "notes.txt",
            "yaml",
        ] {
            std::fs::write(dir.path().join(name), "kind: List\nitems: []\n").unwrap();
        }
        std::fs::create_dir(dir.path().join("sub.yaml")).unwrap();
        let names = |files: Vec<PathBuf>| -> Vec<String> {
            files
                .iter()
                .map(|f| f.file_name().unwrap().to_str().unwrap().to_owned())
                .collect()
        };
        let all = files(&[dir.path().to_owned()], YAML_OR_JSON).unwrap();
        assert_eq!(names(all.clone()), ["a.json", "b.yaml", "c.yml"]);
        assert_eq!(
            names(files(&[dir.path().to_owned()], YAML).unwrap()),
            ["b.yaml", "c.yml"]
        );
        // A file named on its own is read whatever its name.
        let notes = dir.path().join("notes.txt");
        assert_eq!(names(files(&[notes], YAML).unwrap()), ["notes.txt"]);
        assert!(read_documents(&all[0]).unwrap().is_empty());
        let missing = files(&[dir.path().join("nope.yaml")], YAML).unwrap_err();
        assert!(
            missing.to_string().ends_with("nope.yaml does not exist"),
            "{missing}"
        );
        let unreadable = read_documents(&dir.path().join("gone.yaml")).unwrap_err();
        assert!(
            unreadable.to_string().starts_with("cannot read "),
            "{unreadable}"
        );
        // The cause is in the message once: not repeated by an error chain.
        assert!(std::error::Error::source(&unreadable).is_none());
    }

    #[test]
    fn a_broken_file_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("broken.yaml");
        std::fs::write(&file, "kind: [broken\n").unwrap();
        let error = read_documents(&file).unwrap_err();
        assert!(error.to_string().contains("broken.yaml"), "{error}");
    }
}
