//! Command line of the agent. Every flag has a `DRIFT_SENTINEL_<FLAG>` environment equivalent
//! and the defaults of the original Drift Sentinel.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "drift-sentinel",
    version,
    about = "Validating admission webhook that blocks unintended drift of workloads",
    long_about = "Drift Sentinel compares the old and new object of every UPDATE of the workloads its \
rules select and denies (or warns about, or records) changes outside the fields a rule declares \
mutable.\n\nWithout a subcommand, `serve` runs."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the admission webhook (the default).
    Serve(Box<ServeArgs>),
    /// Print the AdmissionReview the API server would send for an UPDATE of one manifest into
    /// another, to try the webhook with curl.
    Review(ReviewArgs),
    /// Audit live objects against what was declared for them (their last-applied configuration,
    /// and imperative edits in managedFields): periodically, or once with `--audit-once` (exit 0
    /// no drift, 1 drift, 2 error); offline with `--rules` and `--objects` (for CI).
    Audit(Box<AuditArgs>),
    /// Print the CustomResourceDefinition of Connection (the chart ships this output).
    Crd,
    /// The demonstration reader of admission export: logs each record of each completed
    /// admission segment of a channel directory, then deletes the segment. Never touches
    /// `.open` segments or audit files. For trying the feature, not for production.
    Reader(ReaderArgs),
}

/// Subcommand names, to tell a flag of the default subcommand from a subcommand.
const SUBCOMMANDS: &[&str] = &["serve", "review", "audit", "crd", "reader", "help"];

#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    /// The object before the change (YAML or JSON).
    #[arg(long)]
    pub old: PathBuf,
    /// The object after the change (YAML or JSON).
    #[arg(long)]
    pub new: PathBuf,
    /// The requesting user.
    #[arg(long, default_value = "kubernetes-admin")]
    pub user: String,
    /// The request uid.
    #[arg(long, default_value = "00000000-0000-0000-0000-000000000001")]
    pub uid: String,
}

/// `drift-sentinel reader` (see `export::reader`).
#[derive(Debug, Clone, clap::Args)]
pub struct ReaderArgs {
    /// Channel directory to consume (`<Connection path>/<channel>`).
    #[arg(long)]
    pub path: PathBuf,
    /// Time between passes.
    #[arg(long, default_value = "1s", value_parser = parse_period)]
    pub interval: Duration,
    /// One pass, then exit (a missing directory is then an error).
    #[arg(long)]
    pub once: bool,
}

/// Parses the process arguments, running `serve` when no subcommand is named.
pub fn parse() -> Cli {
    Cli::parse_from(with_default_subcommand(std::env::args_os().collect()))
}

pub fn with_default_subcommand(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or("");
    let top_level_flag = matches!(first, "-h" | "--help" | "-V" | "--version");
    if !SUBCOMMANDS.contains(&first) && !top_level_flag {
        args.insert(1.min(args.len()), "serve".into());
    }
    args
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Listening")]
pub struct ServeArgs {
    /// Address of the webhook listener (HTTPS when a certificate is given). `:PORT` listens on
    /// every interface.
    #[arg(long, env = "DRIFT_SENTINEL_ADDRESS", default_value = ":8080", value_parser = parse_address)]
    pub address: SocketAddr,

    /// Address of the admin API (`/status`); loopback only, reach it with `kubectl port-forward`.
    #[arg(long, env = "DRIFT_SENTINEL_ADMIN_ADDRESS", default_value = "127.0.0.1:9090", value_parser = parse_loopback_address)]
    pub admin_address: SocketAddr,

    /// TLS certificate (PEM chain). Re-read when the file changes.
    #[arg(long, env = "DRIFT_SENTINEL_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// TLS private key (PEM). Re-read when the file changes.
    #[arg(long, env = "DRIFT_SENTINEL_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,

    /// Lowest TLS version accepted: 1.2 or 1.3.
    #[arg(long, env = "DRIFT_SENTINEL_TLS_MIN_VERSION", default_value = "1.2")]
    pub tls_min_version: TlsMinVersion,

    /// CA bundle (PEM) of the certificates that may call the webhook's paths: with it, a
    /// caller of /validate or /validate-rule without a certificate signed by it and named in
    /// --client-names gets 401 (the probes and /metrics stay open). Re-read when it changes.
    #[arg(long, env = "DRIFT_SENTINEL_CLIENT_CA_FILE")]
    #[arg(requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,

    /// Names (a certificate's CN or one of its DNS SANs) that may call, with --client-ca-file.
    #[arg(long, env = "DRIFT_SENTINEL_CLIENT_NAMES", value_delimiter = ',', default_value = "kube-apiserver", value_parser = parse_client_name)]
    pub client_names: Vec<String>,

    /// Most connections the webhook listener holds at once, TLS handshakes included; at the
    /// limit a new connection closes the one quiet the longest (so the kubelet's probes always
    /// get in). Lowered, with a WARN, to what the open-files limit allows.
    #[arg(long, env = "DRIFT_SENTINEL_MAX_CONNECTIONS", default_value_t = 512, value_parser = clap::value_parser!(u32).range(2..=1_000_000).map(|n| n as usize))]
    pub max_connections: usize,

    /// Path of the admission endpoint.
    #[arg(long, env = "DRIFT_SENTINEL_VALIDATE_PATH", default_value = "/validate", value_parser = parse_http_path)]
    pub validate_path: String,

    /// Path of the rule-validating endpoint (the chart registers it for rule ConfigMaps).
    #[arg(long, env = "DRIFT_SENTINEL_VALIDATE_RULE_PATH", default_value = "/validate-rule", value_parser = parse_http_path)]
    pub validate_rule_path: String,

    /// Path of the liveness endpoint.
    #[arg(long, env = "DRIFT_SENTINEL_HEALTH_PATH", default_value = "/healthz", value_parser = parse_http_path)]
    pub health_path: String,

    /// Path of the readiness endpoint (ready once the first rule sync is done).
    #[arg(long, env = "DRIFT_SENTINEL_READY_PATH", default_value = "/readyz", value_parser = parse_http_path)]
    pub ready_path: String,

    /// Path of the Prometheus metrics endpoint.
    #[arg(long, env = "DRIFT_SENTINEL_METRICS_PATH", default_value = "/metrics", value_parser = parse_http_path)]
    pub metrics_path: String,

    /// How often rule files and TLS files are checked for changes.
    #[arg(long, env = "DRIFT_SENTINEL_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_period, help_heading = "Rule sources")]
    pub reload_interval: Duration,

    /// Longest time to read a request's headers: from a connection's opening for its first
    /// request, from their first byte for a later one (a kept-alive connection waiting for its
    /// next request is idle; only the idle timeout closes it).
    #[arg(long, env = "DRIFT_SENTINEL_READ_HEADER_TIMEOUT", default_value = "5s", value_parser = parse_duration, help_heading = "Timeouts")]
    pub read_header_timeout: Duration,

    /// Longest time to read a request's body.
    #[arg(long, env = "DRIFT_SENTINEL_READ_TIMEOUT", default_value = "15s", value_parser = parse_duration, help_heading = "Timeouts")]
    pub read_timeout: Duration,

    /// Longest time to produce a response once the request is read.
    #[arg(long, env = "DRIFT_SENTINEL_WRITE_TIMEOUT", default_value = "15s", value_parser = parse_duration, help_heading = "Timeouts")]
    pub write_timeout: Duration,

    /// A connection with no request for this long is closed. Longer than the API server's own
    /// limit for an idle webhook connection (90 s), so that the API server closes it first and
    /// never sends a request on a connection the agent is closing.
    #[arg(long, env = "DRIFT_SENTINEL_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration, help_heading = "Timeouts")]
    pub idle_timeout: Duration,

    /// After SIGTERM, how long to keep accepting and answering, not ready, before the listener
    /// closes: long enough for the endpoint's removal to reach kube-proxy and the API server
    /// (the chart sets 10s). Meanwhile HTTP/1 responses carry `Connection: close` and HTTP/2
    /// connections get GOAWAY, so clients move to other replicas without a failed request.
    #[arg(long, env = "DRIFT_SENTINEL_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse_duration, help_heading = "Timeouts")]
    pub shutdown_delay: Duration,

    /// Longest graceful shutdown after the shutdown delay (finishing in-flight requests,
    /// draining the export) before the process exits anyway.
    #[arg(long, env = "DRIFT_SENTINEL_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = parse_duration, help_heading = "Timeouts")]
    pub shutdown_timeout: Duration,

    /// Write Events (events.k8s.io/v1) on the objects the webhook lets through with a finding
    /// (warned, dry-run, bypassed, not compared, a bypass not honoured) and, counted, on the rule
    /// ConfigMap of a denial (reference §6 "Events"). Cluster mode only.
    #[arg(long, env = "DRIFT_SENTINEL_EVENTS", num_args = 0..=1, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub events: bool,

    /// The ConfigMap of the agent's namespace where the webhook publishes the public keys of
    /// --record-signing-key and --record-verify-keys for `kubectl drift` (reference §8 "Trust").
    /// The chart gives each release its own (`<fullname>-record-public-key`) and names it on the
    /// webhook configuration (annotation `drift-sentinel.k8s.io/record-key-configmap`).
    #[arg(long, env = "DRIFT_SENTINEL_RECORD_KEY_CONFIGMAP", default_value = drift_api::events::signature::PUBLIC_KEY_CONFIGMAP, value_parser = parse_configmap_name, value_name = "NAME")]
    pub record_key_configmap: String,

    /// Export every violation (enforce, warn and dry-run) of the webhook to disk, through the
    /// Connection named by --audit-connection (reference §7). Off by default.
    #[arg(long, env = "DRIFT_SENTINEL_ENABLE_ADMISSION_VIOLATION_EXPORT", num_args = 0..=1, default_value_t = false, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Violation export")]
    pub enable_admission_violation_export: bool,

    /// How often publish errors are checked and written to the Connection's status.
    #[arg(long, env = "DRIFT_SENTINEL_CONNECTION_STATUS_INTERVAL", default_value = "10s", value_parser = parse_period, hide = true)]
    pub connection_status_interval: Duration,

    /// Longest time an unchanged healthy publish status goes unwritten.
    #[arg(long, env = "DRIFT_SENTINEL_CONNECTION_HEARTBEAT", default_value = "1m", value_parser = parse_period, hide = true)]
    pub connection_heartbeat: Duration,

    /// Tests only: the export's clock reads an RFC 3339 time from this file.
    #[arg(long, env = "DRIFT_SENTINEL_EXPORT_CLOCK_FILE", hide = true)]
    pub export_clock_file: Option<PathBuf>,

    /// Tests only: the export's free-space probe reads a number of bytes from this file.
    #[arg(long, env = "DRIFT_SENTINEL_EXPORT_FREE_SPACE_FILE", hide = true)]
    pub export_free_space_file: Option<PathBuf>,

    #[command(flatten)]
    pub common: CommonArgs,
}

/// The flags `serve` and `audit` share, with the same names, environment variables and
/// defaults: where rules and namespaces come from, the Connection violations are exported
/// through, who this pod is, and logging.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    #[command(flatten)]
    pub sources: RuleSourceArgs,

    #[command(flatten)]
    pub export: ExportArgs,

    /// The installation's record signing key: a file of exactly 32 bytes (an Ed25519 seed; the
    /// chart makes one on install). The webhook signs each record of edits it writes on an Event
    /// with it, and publishes its public key; the audit verifies the records and signs and
    /// verifies what its Reports remember (reference §8 "Trust"). Unset: records are written
    /// unsigned and the audit names no user from them.
    #[arg(long, env = "DRIFT_SENTINEL_RECORD_SIGNING_KEY", value_name = "FILE")]
    pub record_signing_key: Option<std::path::PathBuf>,

    /// Previous public keys still trusted after a rotation of --record-signing-key: a file of
    /// base64 Ed25519 public keys (as the public key ConfigMap's `data.ed25519` showed them), one
    /// per line, `#` comments, at most 16. Records and Report memory they signed still verify;
    /// only --record-signing-key signs. The webhook publishes them next to its own key
    /// (reference §8 "Trust"). Needs --record-signing-key.
    #[arg(long, env = "DRIFT_SENTINEL_RECORD_VERIFY_KEYS", value_name = "FILE")]
    pub record_verify_keys: Option<std::path::PathBuf>,

    /// Log level: DEBUG, INFO, WARN or ERROR. Logs are JSON, one object per line; the audit
    /// writes them on standard error (its standard output is its summary).
    #[arg(long, env = "DRIFT_SENTINEL_LOG_LEVEL", default_value = "INFO", value_parser = parse_log_level, help_heading = "Logging")]
    pub log_level: tracing::Level,
}

/// Where rules and namespaces come from: files, or the cluster.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Rule sources")]
pub struct RuleSourceArgs {
    /// Rule ConfigMaps from files instead of the cluster: a YAML file or a directory of
    /// `*.yaml`/`*.yml` files, multi-document, ConfigMaps as they would be applied. Repeatable
    /// (or comma-separated in the environment). Files are re-read when they change.
    #[arg(long, env = "DRIFT_SENTINEL_RULES", value_delimiter = ',')]
    pub rules: Vec<PathBuf>,

    /// Namespace documents (for their `drift-sentinel.k8s.io/mode` annotation) instead of the
    /// cluster. Repeatable; a file or a directory.
    #[arg(long, env = "DRIFT_SENTINEL_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<PathBuf>,

    /// Namespaces (globs) whose rule ConfigMaps are cluster rules: they apply as written. A
    /// rule ConfigMap anywhere else is a namespace rule: it acts only on objects of its own
    /// namespace, and only where no cluster rule matches. Default in cluster mode: the agent's
    /// own namespace (--pod-namespace); offline: every rule file is a cluster rule unless this
    /// is given. `*` makes every rule a cluster rule (the original's behaviour; a WARN). The
    /// audit judges each object under the rule that would win at admission: give it the
    /// webhook's value.
    #[arg(long, env = "DRIFT_SENTINEL_CLUSTER_RULE_NAMESPACES")]
    #[arg(value_delimiter = ',')]
    pub cluster_rule_namespaces: Vec<String>,

    /// Kubeconfig for cluster mode (otherwise the in-cluster configuration).
    #[arg(long, env = "DRIFT_SENTINEL_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Cluster mode: how often rule ConfigMaps that could not be read are fetched again.
    #[arg(long, env = "DRIFT_SENTINEL_WATCH_RESYNC", default_value = "30s", value_parser = parse_period)]
    pub watch_resync: Duration,

    /// Cluster mode: the ConfigMap (in the pod's namespace) where the last valid version of
    /// each rule is kept, so that a rule made invalid behind the webhook's back keeps being
    /// enforced in its last valid version across restarts and by new replicas. Created when
    /// absent if the webhook may; the audit only reads it.
    #[arg(
        long,
        env = "DRIFT_SENTINEL_LAST_GOOD_CONFIGMAP",
        default_value = "drift-sentinel-last-good-rules"
    )]
    pub last_good_configmap: String,

    /// Longest wait for the first sync of the cluster watches.
    #[arg(long, env = "DRIFT_SENTINEL_STARTUP_SYNC_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub startup_sync_timeout: Duration,
}

/// The Connection violations are exported through, and who this pod is in its status.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Violation export")]
pub struct ExportArgs {
    /// Name of the Connection resource (in the pod's namespace) that routes exported
    /// violations.
    #[arg(
        long,
        env = "DRIFT_SENTINEL_AUDIT_CONNECTION",
        default_value = "audit-connection"
    )]
    pub audit_connection: String,

    /// Channel: the subdirectory of the Connection's path the records (the audit's runs) go
    /// to.
    #[arg(long, env = "DRIFT_SENTINEL_AUDIT_CHANNEL", default_value = "audit-channel", value_parser = parse_channel)]
    pub audit_channel: String,

    /// Every Connection path must lie inside this directory (`spec.config.path` is read from
    /// `/`: `tmp/violations/topics` and `/tmp/violations/topics` are the same place; `..` is
    /// refused). The chart sets its export volume.
    #[arg(long, env = "DRIFT_SENTINEL_EXPORT_ROOT", default_value = "/", value_parser = parse_export_root)]
    pub export_root: PathBuf,

    /// Read the Connection from this file (YAML) instead of the cluster; re-read when it
    /// changes. Required for export without a cluster.
    #[arg(long, env = "DRIFT_SENTINEL_CONNECTION")]
    pub connection: Option<PathBuf>,

    /// This pod's name: its entry in the Connection's status (`status.byPod[].id`). Defaults
    /// to the host name.
    #[arg(long, env = "DRIFT_SENTINEL_POD_NAME")]
    pub pod_name: Option<String>,

    /// This pod's namespace, where the Connection and the ConfigMap of last good rule
    /// versions are looked up. Defaults to the service account's namespace, or the
    /// kubeconfig's.
    #[arg(long, env = "DRIFT_SENTINEL_POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
}

impl ExportArgs {
    /// This pod's namespace in cluster mode: `--pod-namespace`, else `client`'s default (the
    /// service account's namespace, or the kubeconfig's).
    pub fn namespace_in(&self, client: &kube::Client) -> String {
        self.pod_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned())
    }
}

/// The lowest TLS version the listener accepts (`--tls-min-version`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMinVersion {
    #[default]
    #[value(name = "1.2")]
    Tls12,
    #[value(name = "1.3")]
    Tls13,
}

/// An absolute directory without `..`.
fn parse_export_root(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if !path.is_absolute()
        || path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(format!(
            "invalid export root {text:?}: expected an absolute directory without \"..\""
        ));
    }
    Ok(path.components().collect())
}

/// Where the audit writes OpenReports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportsMode {
    /// One `openreports.io/v1alpha1` Report per namespace, a ClusterReport for cluster-scoped
    /// objects.
    Openreports,
    None,
}

/// The resources a `*` selector audits by default: the webhook's (the chart's `webhook.rules`).
pub use drift_engine::audit::DEFAULT_AUDIT_RESOURCES;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Audit")]
pub struct AuditArgs {
    /// Run one audit and exit: 0 no drift, 1 drift found, 2 error.
    #[arg(long, alias = "once", env = "DRIFT_SENTINEL_AUDIT_ONCE", num_args = 0..=1, default_value_t = false, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub audit_once: bool,

    /// Time between the starts of two audit runs.
    #[arg(long, env = "DRIFT_SENTINEL_AUDIT_INTERVAL", default_value = "60s", value_parser = parse_period)]
    pub audit_interval: Duration,

    /// Objects per list request (pagination): memory does not grow with the number of objects.
    #[arg(long, env = "DRIFT_SENTINEL_AUDIT_CHUNK_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub audit_chunk_size: u32,

    /// Field managers whose `Update`s are imperative edits (comma-separated). The default is
    /// what kubectl writes for edit, patch, set, label, annotate, replace, rollout and scale.
    #[arg(long, env = "DRIFT_SENTINEL_AUDIT_DRIFT_MANAGERS", value_delimiter = ',', default_values = drift_engine::DEFAULT_DRIFT_MANAGERS)]
    pub audit_drift_managers: Vec<String>,

    /// Resources (`group/resource`, the core group empty: `/pods`) a `*` selector audits: the
    /// webhook's resources.
    #[arg(long, env = "DRIFT_SENTINEL_AUDIT_RESOURCES", value_delimiter = ',', default_value = DEFAULT_AUDIT_RESOURCES)]
    pub audit_resources: Vec<String>,

    /// Where results go besides the export: OpenReports (`openreports`, skipped with a warning
    /// when its CRDs are not installed) or nowhere.
    #[arg(long, env = "DRIFT_SENTINEL_AUDIT_REPORTS", value_enum, default_value_t = ReportsMode::Openreports)]
    pub audit_reports: ReportsMode,

    /// Offline: objects to audit instead of the cluster's, as `kubectl get -o yaml` writes them
    /// (`List` documents included). A file or a directory of `*.yaml`/`*.yml`/`*.json`;
    /// repeatable. Needs `--rules`.
    #[arg(
        long,
        env = "DRIFT_SENTINEL_OBJECTS",
        value_delimiter = ',',
        requires = "rules"
    )]
    pub objects: Vec<PathBuf>,

    /// Export each run's drifted objects to `<path>/<channel>/<run-id>.log` through the
    /// Connection named by --audit-connection (reference §7, §8).
    #[arg(long, env = "DRIFT_SENTINEL_ENABLE_VIOLATION_EXPORT", num_args = 0..=1, default_value_t = false, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_violation_export: bool,

    /// Write a `DriftDetected` Warning Event on each drifted object, and read the webhook's
    /// Events to name who made each drifted field and why it got through (reference §6
    /// "Events", §8 "Who and why"). Cluster mode only.
    #[arg(long, env = "DRIFT_SENTINEL_EVENTS", num_args = 0..=1, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub events: bool,

    /// The ValidatingWebhookConfiguration that registers the webhook (the chart's full name).
    /// Read once per run: a drifted field nobody recorded is told "outside what the webhook
    /// intercepts" when its selectors or rules do not send the object's UPDATEs to the webhook
    /// (reference §8 "Who and why"). Unset: that cannot be told.
    #[arg(long, env = "DRIFT_SENTINEL_WEBHOOK_CONFIGURATION")]
    pub webhook_configuration: Option<String>,

    /// Periodic mode: address of the health, readiness and metrics listener (plain HTTP).
    #[arg(long, env = "DRIFT_SENTINEL_ADDRESS", default_value = ":8080", value_parser = parse_address)]
    pub address: SocketAddr,

    /// Periodic mode: address of the admin API (`/status`, `/violations`); loopback only.
    #[arg(long, env = "DRIFT_SENTINEL_ADMIN_ADDRESS", default_value = "127.0.0.1:9090", value_parser = parse_loopback_address)]
    pub admin_address: SocketAddr,

    #[command(flatten)]
    pub common: CommonArgs,
}

/// `:8080`, `0.0.0.0:8080`, `[::1]:8080` or `localhost:8080`.
pub fn parse_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("invalid port in address {text:?}"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Some(port) = text.strip_prefix("localhost:") {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("invalid port in address {text:?}"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse().map_err(|_| {
        format!("invalid address {text:?}: expected HOST:PORT with an IP address, or :PORT")
    })
}

fn parse_loopback_address(text: &str) -> Result<SocketAddr, String> {
    let address = parse_address(text)?;
    if !address.ip().is_loopback() {
        return Err(format!(
            "admin address {text:?} is not a loopback address; the admin API listens on loopback only (e.g. 127.0.0.1:9090)"
        ));
    }
    Ok(address)
}

/// A name of `--client-names`: not empty, no spaces.
fn parse_client_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!(
            "{text:?} is not a certificate name: give a CN or DNS name such as kube-apiserver"
        ));
    }
    Ok(name.to_owned())
}

/// A ConfigMap name: a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253).
fn parse_configmap_name(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "invalid ConfigMap name {text:?}: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters"
        ))
    }
}

fn parse_http_path(text: &str) -> Result<String, String> {
    if !text.starts_with('/') || text.contains(char::is_whitespace) {
        return Err(format!(
            "invalid HTTP path {text:?}: it must start with '/' and contain no spaces"
        ));
    }
    Ok(text.to_owned())
}

/// A channel is one directory name under the Connection's path.
fn parse_channel(text: &str) -> Result<String, String> {
    let valid =
        !text.is_empty() && text != "." && text != ".." && !text.contains(['/', '\\', '\0']);
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "invalid channel {text:?}: it names one directory under the Connection's path (no '/', not '.' or '..')"
        ))
    }
}

fn parse_log_level(text: &str) -> Result<tracing::Level, String> {
    match text.trim().to_ascii_uppercase().as_str() {
        "DEBUG" => Ok(tracing::Level::DEBUG),
        "INFO" => Ok(tracing::Level::INFO),
        "WARN" | "WARNING" => Ok(tracing::Level::WARN),
        "ERROR" => Ok(tracing::Level::ERROR),
        _ => Err(format!(
            "invalid log level {text:?}: expected DEBUG, INFO, WARN or ERROR"
        )),
    }
}

/// A duration that paces a loop: it must not be zero.
pub fn parse_period(text: &str) -> Result<Duration, String> {
    let period = parse_duration(text)?;
    if period < Duration::from_millis(10) {
        return Err(format!("invalid period {text:?}: it must be at least 10ms"));
    }
    Ok(period)
}

/// A duration in humantime's syntax (`30s`, `1m30s`, `500ms`, `1.5s`, `2h 30min`), or — as the
/// original agent's flags took them — a bare number of seconds (`10`, `1.5`); a decimal point
/// may lack the digits on one side (`.5s`, `5.s`). A fraction humantime cannot hold exactly
/// (of a nanosecond, or `0.001h`, which it counts in whole seconds) is refused, not rounded.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let error = |why: &dyn std::fmt::Display| {
        format!("invalid duration {text:?}: {why}; expected e.g. 30s, 1m30s, 500ms")
    };
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|e| error(&e));
    }
    humantime::parse_duration(&with_whole_decimals(text)).map_err(|e| error(&e))
}

/// `.5s` as `0.5s` and `5.s` as `5.0s`: humantime wants digits on both sides of a decimal
/// point, which the durations accepted before it did not.
fn with_whole_decimals(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('.') {
        return text.into();
    }
    let mut whole = String::with_capacity(text.len() + 2);
    let mut previous = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let digit_before = previous.is_some_and(|p: char| p.is_ascii_digit());
        let digit_after = chars.peek().is_some_and(char::is_ascii_digit);
        if c == '.' && !digit_before && digit_after {
            whole.push('0');
        }
        whole.push(c);
        if c == '.' && digit_before && !digit_after {
            whole.push('0');
        }
        previous = Some(c);
    }
    whole.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_key_configmap_names() {
        // (text, accepted)
        let cases = [
            ("drift-sentinel-record-key", true),
            ("ds-drift-sentinel-record-public-key", true),
            ("a.b-1", true),
            ("", false),
            ("Upper", false),
            ("-leading", false),
            ("trailing-", false),
            ("has space", false),
            ("slash/name", false),
        ];
        for (text, accepted) in cases {
            assert_eq!(parse_configmap_name(text).is_ok(), accepted, "{text:?}");
        }
        assert!(parse_configmap_name(&"a".repeat(254)).is_err());
        let e = parse_configmap_name("Upper").unwrap_err();
        assert!(
            e.contains("\"Upper\"") && e.contains("lowercase letters"),
            "{e}"
        );
        // The default keeps installations from before the flag working.
        let cli = Cli::try_parse_from(["drift-sentinel", "serve"]).unwrap();
        let Command::Serve(serve) = cli.command else {
            panic!("serve");
        };
        assert_eq!(
            serve.record_key_configmap,
            drift_api::events::signature::PUBLIC_KEY_CONFIGMAP
        );
    }

    #[test]
    fn durations() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("30s", Some(Duration::from_secs(30))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("500ms", Some(Duration::from_millis(500))),
            ("1h", Some(Duration::from_secs(3600))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("10", Some(Duration::from_secs(10))),
            ("", None),
            ("s", None),
            ("10x", None),
            ("-1s", None),
            // humantime's syntax, beyond what the durations took before it.
            ("1m 30s", Some(Duration::from_secs(90))),
            ("2min", Some(Duration::from_secs(120))),
            ("1h30m15s500ms", Some(Duration::from_millis(5_415_500))),
            ("250µs", Some(Duration::from_micros(250))),
            // A decimal point with digits on one side only, as before.
            (".5s", Some(Duration::from_millis(500))),
            ("5.s", Some(Duration::from_secs(5))),
            (".s", None),
        ];
        assert!(parse_period("0s").is_err());
        assert!(parse_period("200ms").is_ok());
        for (text, want) in cases {
            assert_eq!(parse_duration(text).ok(), *want, "{text}");
        }
        // The message names the value (clap names the flag).
        assert!(parse_duration("ten").unwrap_err().contains("\"ten\""));
    }

    #[test]
    fn addresses() {
        assert_eq!(parse_address(":8080").unwrap().to_string(), "0.0.0.0:8080");
        assert_eq!(
            parse_address("127.0.0.1:1").unwrap().to_string(),
            "127.0.0.1:1"
        );
        assert_eq!(
            parse_address("localhost:9").unwrap().to_string(),
            "127.0.0.1:9"
        );
        assert!(parse_address("nope").is_err());
        assert!(parse_loopback_address("0.0.0.0:9090").is_err());
        assert!(parse_loopback_address("[::1]:9090").is_ok());
    }

    #[test]
    fn serve_is_the_default_subcommand() {
        let args = |list: &[&str]| -> Vec<String> {
            with_default_subcommand(list.iter().map(Into::into).collect())
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect()
        };
        assert_eq!(args(&["ds"]), ["ds", "serve"]);
        assert_eq!(
            args(&["ds", "--rules", "x"]),
            ["ds", "serve", "--rules", "x"]
        );
        assert_eq!(
            args(&["ds", "serve", "--rules", "x"]),
            ["ds", "serve", "--rules", "x"]
        );
        assert_eq!(args(&["ds", "--help"]), ["ds", "--help"]);
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn arguments() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            reader: ReaderArgs,
        }
        let cli = Cli::try_parse_from(["reader", "--path", "/tmp/x"]).unwrap();
        assert_eq!(cli.reader.interval, Duration::from_secs(1));
        assert!(!cli.reader.once);
        let cli = Cli::try_parse_from([
            "reader",
            "--path",
            "/tmp/x",
            "--interval",
            "250ms",
            "--once",
        ])
        .unwrap();
        assert_eq!(cli.reader.interval, Duration::from_millis(250));
        assert!(cli.reader.once);
        assert!(Cli::try_parse_from(["reader", "--path", "/x", "--interval", "1ms"]).is_err());
        assert!(Cli::try_parse_from(["reader"]).is_err());
    }
}
