//! What the load benchmark sends: the realistic Deployment of `drift_testkit::objects` (with
//! more environment variables than the engine's benchmarks use, so that one object is about
//! 14 KB and its UPDATE review about 29 KB), the 20 rule files, and the worst cases of reference §5
//! "Bounded answers" (200,000 changed container args; 2,000,000 changed list items in an
//! 8 MB review).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Environment variables of the main container: one Deployment object is then ~14 KB of JSON.
pub const ENV_COUNT: usize = 130;

/// The agent's body limit (reference §5); the largest review stays under it.
pub const MAX_BODY_BYTES: usize = drift_sentinel::webhook::MAX_BODY_BYTES;

/// Changed container args of `args-200k.json`.
pub const ARGS_ITEMS: usize = 200_000;

/// Changed list items of `items-2m.json` (in each of the two objects).
pub const LIST_ITEMS: usize = 2_000_000;

/// How many rule files; only the last one tried matches the reviews.
pub const RULE_COUNT: usize = 20;

pub use drift_testkit::objects::{
    IMAGES, NAMESPACE, NEW_IMAGES, deployment_with, review, with_last_applied,
};

/// The realistic Deployment of the load rounds: [`ENV_COUNT`] variables in its main container.
pub fn deployment(images: [&str; 3], replicas: i64) -> Value {
    deployment_with(images, replicas, ENV_COUNT)
}

/// `image.json`: only the main container's image changes (allowed: the rule makes images
/// mutable).
pub fn image_review() -> String {
    review(
        "bench-image",
        &deployment(IMAGES, 3),
        &deployment(NEW_IMAGES, 3),
    )
    .to_string()
}

/// `replicas.json`: `spec.replicas` changes (and the last-applied annotation with it, as under
/// `kubectl apply`): denied, the rule is in enforce mode.
pub fn replicas_review() -> String {
    review(
        "bench-replicas",
        &deployment(IMAGES, 3),
        &deployment(IMAGES, 5),
    )
    .to_string()
}

/// `apply.json`: the image edit as a client-side `kubectl apply` sends it, with the
/// `last-applied-configuration` annotation holding the whole manifest, rewritten with the
/// image (as in `scripts/apiserver-bench.sh`): about 13 KB of escaped JSON on each side, 57 KB
/// the review. Allowed: the rule makes images and the annotation mutable.
pub fn apply_review() -> String {
    review(
        "bench-apply",
        &with_last_applied(deployment(IMAGES, 3)),
        &with_last_applied(deployment(NEW_IMAGES, 3)),
    )
    .to_string()
}

/// A review of the realistic Deployment whose main container's `args` hold `count` items, all
/// different between the two objects; `item(i, changed, out)` writes item `i` as JSON. The list
/// is spliced into the serialised review, so that millions of items cost no DOM here.
fn big_list_review(uid: &str, count: usize, item: impl Fn(usize, bool, &mut String)) -> String {
    const OLD: &str = "@@drift-bench-old-items@@";
    const NEW: &str = "@@drift-bench-new-items@@";
    let with_args = |marker: &str| {
        let mut object = deployment(IMAGES, 3);
        object["spec"]["template"]["spec"]["containers"][0]["args"] = json!([marker]);
        object
    };
    let text = review(uid, &with_args(OLD), &with_args(NEW)).to_string();
    let list = |changed: bool| {
        let mut list = String::with_capacity(count * 4);
        for i in 0..count {
            if i > 0 {
                list.push(',');
            }
            item(i, changed, &mut list);
        }
        list
    };
    text.replacen(&format!("\"{OLD}\""), &list(false), 1)
        .replacen(&format!("\"{NEW}\""), &list(true), 1)
}

/// `args-200k.json`: the main container has 200,000 one-character args, every one different
/// in the new object (~800 KB per object, ~1.6 MB the review).
pub fn args_review() -> String {
    big_list_review("bench-args-200k", ARGS_ITEMS, |i, changed, out| {
        out.push('"');
        out.push((b'a' + ((i + usize::from(changed)) % 26) as u8) as char);
        out.push('"');
    })
}

/// `items-2m.json`: 2,000,000 one-digit numbers in the main container's `args` of each object
/// (not what the API server would accept in `args`, but the webhook judges JSON, not schemas),
/// every one different in the new object: ~8 MB, under the 8 MiB body limit.
pub fn items_review() -> String {
    big_list_review("bench-items-2m", LIST_ITEMS, |i, changed, out| {
        out.push((b'0' + ((i + usize::from(changed)) % 10) as u8) as char);
    })
}

/// The engine benchmarks' rules, which the load rounds are judged under too.
#[path = "../../engine/benches/fixtures.rs"]
mod engine_benches;

/// The rule that matches the reviews: Deployments in `prod-*`, images and the apply annotation
/// mutable, the lowest priority of all, so that it is tried last.
pub const MATCHING_RULE_SPEC: &str = engine_benches::RULE_SPEC;

/// A rule ConfigMap as it would be applied (the format of the agent's `--rules` files).
pub fn rule_config_map(namespace: &str, name: &str, spec: &str) -> String {
    let indented: String = spec.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  annotations:\n    drift-sentinel.k8s.io/rule: \"true\"\ndata:\n  spec: |\n{indented}"
    )
}

/// The 20 rule files, `(file name, ConfigMap YAML)`: 19 rules of higher priority that select
/// Deployments in other namespaces (`teams/team-NN`), and the matching rule
/// (`drift-sentinel/production`) last.
pub fn rule_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = (0..RULE_COUNT - 1)
        .map(|i| {
            let spec = engine_benches::team_rule_spec(i);
            (
                format!("{i:02}-team-{i:02}.yaml"),
                rule_config_map("teams", &format!("team-{i:02}"), &spec),
            )
        })
        .collect();
    files.push((
        format!("{:02}-production.yaml", RULE_COUNT - 1),
        rule_config_map("drift-sentinel", "production", MATCHING_RULE_SPEC),
    ));
    files
}

/// [`rule_files`] with the matching rule in mode `warn`: every `replicas.json` review is then a
/// warned edit, an Event finding on every request (the most work Events add to a decision; the
/// rules of `scripts/events-bench.sh` and `finding_loop`).
pub fn warn_rule_files() -> Vec<(String, String)> {
    let mut files = rule_files();
    let (_, matching) = files.last_mut().expect("the matching rule");
    assert!(matching.contains("mode: enforce"), "{matching}");
    *matching = matching.replace("mode: enforce", "mode: warn");
    files
}

/// A CA and a serving certificate for `127.0.0.1` and `localhost`, in PEM; and a CA of
/// webhook callers with the API server's client certificate (client authentication).
pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub clients_ca_pem: String,
    /// The client certificate (CN `kube-apiserver`) followed by its key.
    pub client_pem: String,
}

impl Pki {
    pub fn new() -> anyhow::Result<Self> {
        let ca = drift_testkit::pki::Ca::new("drift-bench");
        let serving = ca.serving(&["127.0.0.1", "localhost"]);
        let clients = drift_testkit::pki::Ca::new("drift-bench-clients");
        let client = clients.client("kube-apiserver", &[]);
        Ok(Self {
            ca_pem: ca.cert_pem(),
            cert_pem: serving.cert_pem,
            key_pem: serving.key_pem,
            clients_ca_pem: clients.cert_pem(),
            client_pem: format!("{}{}", client.cert_pem, client.key_pem),
        })
    }
}

/// The review bodies, by file name.
pub const REVIEWS: [&str; 5] = [
    "image.json",
    "replicas.json",
    "apply.json",
    "args-200k.json",
    "items-2m.json",
];

/// Writes everything into `dir`: `ca.crt`, `tls.crt`, `tls.key`, `clients-ca.crt`,
/// `client.pem`, `rules/` and the five reviews. Returns each written review's path and size.
pub fn write_all(dir: &Path) -> anyhow::Result<Vec<(PathBuf, usize)>> {
    use anyhow::Context as _;
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let pki = Pki::new()?;
    write(dir.join("ca.crt"), &pki.ca_pem)?;
    write(dir.join("tls.key"), &pki.key_pem)?;
    write(dir.join("tls.crt"), &pki.cert_pem)?;
    write(dir.join("clients-ca.crt"), &pki.clients_ca_pem)?;
    write(dir.join("client.pem"), &pki.client_pem)?;
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules)?;
    for (name, text) in rule_files() {
        write(rules.join(name), &text)?;
    }
    let mut written = Vec::new();
    for name in REVIEWS {
        let text = match name {
            "image.json" => image_review(),
            "replicas.json" => replicas_review(),
            "apply.json" => apply_review(),
            "args-200k.json" => args_review(),
            _ => items_review(),
        };
        anyhow::ensure!(
            text.len() <= MAX_BODY_BYTES,
            "{name} is {} bytes, over the agent's body limit",
            text.len()
        );
        let path = dir.join(name);
        write(path.clone(), &text)?;
        written.push((path, text.len()));
    }
    Ok(written)
}
