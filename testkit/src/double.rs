//! The API server double for synchronous black-box tests: [`Double::builder`] (its runtime's
//! worker threads, the kubeconfig's contexts) starts an [`ApiServer`] on a tokio runtime of its
//! own, with a kubeconfig pointing at it in a temporary directory; the server stops, on its
//! runtime, when the [`Double`] is dropped.
//!
//! ```no_run
//! # use drift_testkit::double::Double;
//! # use serde_json::json;
//! let double = Double::builder().namespace("prod").start();
//! double
//!     .api()
//!     .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
//! // kubectl-drift explain deploy/web --kubeconfig double.kubeconfig() …
//! ```

use std::path::{Path, PathBuf};

use crate::ApiServer;

/// How a [`Double`] is started; made by [`Double::builder`].
#[must_use = "a double serves once started"]
pub struct DoubleBuilder {
    workers: usize,
    contexts: Vec<(String, String)>,
}

impl DoubleBuilder {
    /// The runtime's worker threads (1 unless given).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// The namespace of the kubeconfig's current context, `double` (`default` unless given).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.contexts[0].1 = namespace.to_owned();
        self
    }

    /// Another context of the kubeconfig, on the same server, with its namespace.
    pub fn context(mut self, name: &str, namespace: &str) -> Self {
        self.contexts.push((name.to_owned(), namespace.to_owned()));
        self
    }

    pub fn start(self) -> Double {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.workers)
            .enable_all()
            .build()
            .expect("the double's runtime");
        let server = runtime
            .block_on(ApiServer::start())
            .expect("the API server double");
        let dir = tempfile::tempdir().expect("the double's directory");
        let contexts: Vec<(&str, &str)> = self
            .contexts
            .iter()
            .map(|(name, namespace)| (name.as_str(), namespace.as_str()))
            .collect();
        let kubeconfig = server
            .write_kubeconfig_with(dir.path(), &contexts)
            .expect("the double's kubeconfig");
        Double {
            runtime,
            server: Some(server),
            dir,
            kubeconfig,
        }
    }
}

/// The API server double on a runtime of its own, and a kubeconfig pointing at it.
pub struct Double {
    runtime: tokio::runtime::Runtime,
    server: Option<ApiServer>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Double {
    /// A double on one worker thread, its kubeconfig's context `double` in namespace `default`.
    pub fn builder() -> DoubleBuilder {
        DoubleBuilder {
            workers: 1,
            contexts: vec![("double".to_owned(), "default".to_owned())],
        }
    }

    /// The server: its store, faults, requests, pod port targets.
    pub fn api(&self) -> &ApiServer {
        self.server.as_ref().expect("the server runs until drop")
    }

    /// The temporary directory of the kubeconfig, for a test's files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kubeconfig pointing at the server (`--kubeconfig`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
}

impl Drop for Double {
    fn drop(&mut self) {
        // The server's task and port-forwards end on its own runtime.
        let _guard = self.runtime.enter();
        self.server.take();
    }
}
