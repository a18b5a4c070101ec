//! The Kubernetes client of both processes: from `--kubeconfig` or the in-cluster service
//! account, with a timeout on every request, and the server-side timeout every watch made
//! with it must set.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Every request to the API server: connecting, and the longest silence while reading a
/// response. Watches are closed by the server before that ([`WATCH_TIMEOUT_SECONDS`]), so an
/// idle watch never trips it, while a server that stops answering is noticed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Server-side timeout of each watch request; the watch then resumes where it was. Every
/// watch made with [`client`]'s clients must set it (or a shorter one), or [`READ_TIMEOUT`]
/// cuts it while it is idle.
pub const WATCH_TIMEOUT_SECONDS: u32 = 45;

/// A kube client from `--kubeconfig`, or the in-cluster service account, with a timeout on
/// every request.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None => Config::incluster().context("cannot load the in-cluster configuration")?,
    };
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    config.write_timeout = Some(WRITE_TIMEOUT);
    Client::try_from(config).context("cannot build the Kubernetes client")
}

/// Whether a cluster configuration is available: an explicit kubeconfig, or the in-cluster
/// service account.
pub fn cluster_configured(kubeconfig: Option<&Path>) -> bool {
    kubeconfig.is_some() || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}
