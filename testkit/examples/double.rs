//! Runs the API server double on its own, to try the plugin's cluster commands by hand and to
//! record the sessions of `docs/plugin.md`:
//!
//!   cargo run -p drift-testkit --example double -- --kubeconfig-dir /tmp/double \
//!       [--forward NAMESPACE/POD:PORT=127.0.0.1:9090]... MANIFEST.yaml...
//!
//! Every document of every manifest is stored (kinds the double serves); `--forward` points a
//! pod's port-forward at a local address (an agent's admin listener). The kubeconfig is written
//! to `<dir>/kubeconfig`. Runs until interrupted.

use std::net::SocketAddr;
use std::path::PathBuf;

fn usage(message: &str) -> ! {
    eprintln!(
        "error: {message}\nusage: double --kubeconfig-dir DIR [--forward NS/POD:PORT=ADDR]... MANIFEST..."
    );
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir: Option<PathBuf> = None;
    let mut forwards: Vec<(String, String, u16, SocketAddr)> = Vec::new();
    let mut manifests: Vec<PathBuf> = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--kubeconfig-dir" => {
                dir = Some(
                    args.next()
                        .unwrap_or_else(|| usage("--kubeconfig-dir needs a directory"))
                        .into(),
                );
            }
            "--forward" => {
                let spec = args
                    .next()
                    .unwrap_or_else(|| usage("--forward needs NS/POD:PORT=ADDR"));
                let parsed = (|| {
                    let (pod, addr) = spec.split_once('=')?;
                    let (pod, port) = pod.rsplit_once(':')?;
                    let (namespace, pod) = pod.split_once('/')?;
                    Some((
                        namespace.to_owned(),
                        pod.to_owned(),
                        port.parse().ok()?,
                        addr.parse().ok()?,
                    ))
                })();
                forwards.push(parsed.unwrap_or_else(|| usage(&format!("bad --forward {spec:?}"))));
            }
            _ => manifests.push(arg.into()),
        }
    }
    let dir = dir.unwrap_or_else(|| usage("--kubeconfig-dir is required"));
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| usage(&e.to_string()));
    runtime.block_on(async {
        let server = drift_testkit::ApiServer::start()
            .await
            .unwrap_or_else(|e| usage(&format!("cannot start: {e}")));
        for path in &manifests {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| usage(&format!("cannot read {}: {e}", path.display())));
            for document in serde_yaml::Deserializer::from_str(&text) {
                let value: serde_json::Value = serde::Deserialize::deserialize(document)
                    .unwrap_or_else(|e| usage(&format!("{}: {e}", path.display())));
                if !value.is_null() {
                    server.apply(value);
                }
            }
        }
        for (namespace, pod, port, target) in &forwards {
            server.set_pod_port_target(namespace, pod, *port, *target);
        }
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| usage(&e.to_string()));
        let kubeconfig = server
            .write_kubeconfig(&dir)
            .unwrap_or_else(|e| usage(&format!("cannot write the kubeconfig: {e}")));
        println!(
            "serving {} — KUBECONFIG={}",
            server.url(),
            kubeconfig.display()
        );
        let _ = tokio::signal::ctrl_c().await;
    });
}
