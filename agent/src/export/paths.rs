//! Where export files go (reference §7 "Where files go"): a Connection's `spec.config.path` is read
//! from `/` (`tmp/violations/topics` and `/tmp/violations/topics` name the same place), must lie
//! under the export root (`--export-root`; the chart sets its export volume, so a Connection
//! edited to point elsewhere is refused), and may not hold a `..` segment. The
//! directories on the way are created with mode 0700 without ever following a symbolic link
//! (each step is opened relative to the previous one with `O_NOFOLLOW`), and a channel directory
//! that is a symbolic link or belongs to another user is refused. The mode of a directory the
//! agent did not create is never changed.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// Why a Connection path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path {0:?} has a \"..\" segment (export paths may not climb out of a directory)")]
    ParentSegment(String),
    #[error("path {path:?} lies outside the export root {root} (--export-root)")]
    OutsideRoot { path: String, root: String },
}

/// `path` (a Connection's `spec.config.path`) as a directory under `root`.
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, PathError> {
    let relative = Path::new(path.trim_start_matches('/'));
    if relative
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(PathError::ParentSegment(path.to_owned()));
    }
    // `/a/./b` is `/a/b`; no `..` is left to resolve.
    let absolute: PathBuf = Path::new("/").join(relative).components().collect();
    if !absolute.starts_with(root) {
        return Err(PathError::OutsideRoot {
            path: path.to_owned(),
            root: root.display().to_string(),
        });
    }
    Ok(absolute)
}

/// Makes sure `dir` (inside `root`) exists: every missing directory below `root` is created
/// with mode 0700; a symbolic link anywhere below `root` is an error, and so is a final
/// directory that another user owns. Returns whether the final directory was created now.
pub fn ensure_dir(root: &Path, dir: &Path) -> io::Result<bool> {
    let below = dir.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not inside {}", dir.display(), root.display()),
        )
    })?;
    let mut current: OwnedFd = rustix::fs::open(
        root,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut created = false;
    let mut walked = root.to_path_buf();
    for component in below.components() {
        let Component::Normal(name) = component else {
            continue;
        };
        walked.push(name);
        created = match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(e.into()),
        };
        current = rustix::fs::openat(
            &current,
            name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a symbolic link or not a directory: export directories are never reached through links",
                        walked.display()
                    ),
                )
            }
            e => e.into(),
        })?;
    }
    let stat = rustix::fs::fstat(&current)?;
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to user {}, not to this agent's user {me}: it is not used",
                dir.display(),
                stat.st_uid
            ),
        ));
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_under_the_root() {
        let root = Path::new("/");
        assert_eq!(
            resolve(root, "tmp/violations/topics").unwrap(),
            Path::new("/tmp/violations/topics")
        );
        assert_eq!(
            resolve(root, "/tmp/violations/topics").unwrap(),
            Path::new("/tmp/violations/topics")
        );
        assert_eq!(
            resolve(root, "/tmp/./violations/").unwrap(),
            Path::new("/tmp/violations")
        );
        assert!(matches!(
            resolve(root, "tmp/../etc"),
            Err(PathError::ParentSegment(_))
        ));
        assert!(matches!(
            resolve(root, "../x"),
            Err(PathError::ParentSegment(_))
        ));
        let volume = Path::new("/tmp/violations");
        assert_eq!(
            resolve(volume, "tmp/violations/topics").unwrap(),
            Path::new("/tmp/violations/topics")
        );
        assert!(matches!(
            resolve(volume, "/etc/drift"),
            Err(PathError::OutsideRoot { .. })
        ));
        assert!(matches!(
            resolve(volume, "/tmp/violationsX/a"),
            Err(PathError::OutsideRoot { .. })
        ));
    }

    #[test]
    fn directories_are_made_0700_and_links_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/channel");
        assert!(ensure_dir(root.path(), &dir).unwrap());
        for part in ["a", "a/b", "a/b/channel"] {
            let mode = std::fs::metadata(root.path().join(part))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{part}");
        }
        assert!(!ensure_dir(root.path(), &dir).unwrap(), "exists now");

        // An existing directory keeps its mode.
        let open = root.path().join("shared");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!ensure_dir(root.path(), &open).unwrap());
        let mode = std::fs::metadata(&open).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);

        // A symbolic link on the way, or as the channel directory, is refused.
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.path().join("link")).unwrap();
        let error = ensure_dir(root.path(), &root.path().join("link/channel")).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        let error = ensure_dir(root.path(), &root.path().join("link")).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(
            std::fs::read_dir(elsewhere.path())
                .unwrap()
                .next()
                .is_none(),
            "nothing created through the link"
        );
    }
}
