//! The audit's judgement of one live object (reference §8): the realistic Deployment of
//! `drift_testkit::objects` (~10 KB, three containers and an init container) with its
//! `last-applied-configuration` baseline, as `drift-sentinel audit` judges each object of a
//! page. `as_applied`: the baseline is the manifest as the API server stores it (clean);
//! `zeros_spelled`: the manifest also spells out the zeros the API server leaves out
//! (`paused: false`, `hostNetwork: false`, every container's `tty`/`stdin: false`,
//! `workingDir: ""`, every volume mount's `readOnly: false` …), clean since issue 41;
//! `image_drift`: one image changed live (drifted).

mod fixtures;

use std::hint::black_box;
use std::time::SystemTime;

use criterion::{Criterion, criterion_group, criterion_main};
use drift_engine::{
    AuditContext, DEFAULT_DRIFT_MANAGERS, Detail, RuleId, RuleSet, RuleSource, SpecText, audit,
};
use fixtures::{IMAGES, NEW_IMAGES, deployment, with_last_applied};
use serde_json::{Value, json};

/// The manifest of `live`'s baseline with the zeros a chart renders spelled out.
fn spelled_zeros(mut manifest: Value) -> Value {
    manifest["spec"]["paused"] = json!(false);
    manifest["spec"]["minReadySeconds"] = json!(0);
    let pod = &mut manifest["spec"]["template"]["spec"];
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        pod[field] = json!(false);
    }
    pod["priorityClassName"] = json!("");
    for list in ["containers", "initContainers"] {
        for container in pod[list].as_array_mut().expect("containers") {
            for field in ["tty", "stdin", "stdinOnce"] {
                container[field] = json!(false);
            }
            container["workingDir"] = json!("");
            for mount in container["volumeMounts"].as_array_mut().expect("mounts") {
                if mount.get("readOnly").is_none() {
                    mount["readOnly"] = json!(false);
                }
                mount["subPath"] = json!("");
            }
            for port in container["ports"].as_array_mut().expect("ports") {
                port["hostPort"] = json!(0);
            }
        }
    }
    manifest
}

/// `live` with `baseline` as its last-applied annotation (what `with_last_applied` keeps).
fn with_baseline(mut live: Value, baseline: &Value) -> Value {
    live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(format!("{baseline}\n"));
    live
}

fn bench(c: &mut Criterion) {
    let rules = RuleSet::build([RuleSource {
        id: RuleId {
            namespace: "drift-sentinel".into(),
            name: "workloads".into(),
        },
        spec: SpecText::Yaml(
            "mode: enforce\nnamespaces: ['*']\nselectors: [{apiGroup: apps, kind: Deployment}]\nmutable: [spec.replicas]\n"
                .into(),
        ),
        origin: None,
    }]);
    let as_applied = with_last_applied(deployment(IMAGES, 3));
    let manifest: Value = serde_json::from_str(
        as_applied["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("the baseline"),
    )
    .expect("JSON");
    let zeros_spelled = with_baseline(deployment(IMAGES, 3), &spelled_zeros(manifest.clone()));
    let image_drift = with_baseline(deployment(NEW_IMAGES, 3), &manifest);
    let managers: Vec<String> = DEFAULT_DRIFT_MANAGERS
        .iter()
        .map(|m| m.to_string())
        .collect();
    let context = AuditContext {
        namespace_mode: None,
        drift_managers: &managers,
        now: SystemTime::UNIX_EPOCH,
    };
    let mut group = c.benchmark_group("audit");
    for (name, object, expected) in [
        ("as_applied", &as_applied, "clean"),
        ("zeros_spelled", &zeros_spelled, "clean"),
        ("image_drift", &image_drift, "drifted"),
    ] {
        // The benchmark measures the right thing only if the judgement is the expected one.
        let judged = audit(&rules, object, &context, Detail::Verdict);
        assert_eq!(
            judged.result_label(),
            expected,
            "{name}: {:?}",
            judged.drift()
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(audit(
                    black_box(&rules),
                    black_box(object),
                    &context,
                    Detail::Verdict,
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
