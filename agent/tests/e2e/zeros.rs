//! Zero values the API server leaves out (reference §4, §8 step 2), on the real API server:
//! Deployments, StatefulSets and DaemonSets whose manifests spell out `false`, `0` and `""`
//! across their fields (`paused: false`, `hostNetwork: false`, `readOnly: false`, `value: ""`,
//! and `imagePullPolicy: ""`, which the API server replaces with a default …), applied with
//! `kubectl apply` and never touched, are clean for `drift-sentinel audit
//! --once` and `kubectl drift audit`; `kubectl edit` of each such field to another value (and
//! of the zeros the API server keeps: pointer fields, map values) is reported at that field;
//! re-applying the same manifests removes a finding only together with its drift. At
//! admission, `kubectl apply` of such a manifest over a server-side applied object is allowed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use libtest_mimic::Trial;

use crate::env::{AGENT_NAMESPACE, Env, shared, stderr, stdout};
use crate::trial;

pub fn tests() -> Vec<Trial> {
    vec![
        trial!(zeros_as_applied_are_clean_and_edits_of_them_are_drift),
        trial!(an_apply_spelling_out_zeros_over_a_server_side_apply_is_allowed),
    ]
}

const NS: &str = "e2e-zeros";

/// A workload of `kind` named `name` whose manifest spells out the zeros a chart renders: those
/// the API server leaves out (empty lists and maps too), those its defaulting replaces
/// (`imagePullPolicy: ""`, `protocol: ""`, a probe's `timeoutSeconds: 0`, `dnsPolicy: ""`), and
/// those it keeps (a pointer field's `false` and `0`, a map value's `""`).
fn manifest(namespace: &str, kind: &str, name: &str) -> String {
    let top = match kind {
        "Deployment" => "  replicas: 1\n  minReadySeconds: 0\n  paused: false\n",
        "StatefulSet" => "  replicas: 1\n  minReadySeconds: 0\n  serviceName: web\n",
        _ => "  minReadySeconds: 0\n",
    };
    format!(
        r#"apiVersion: apps/v1
kind: {kind}
metadata:
  name: {name}
  namespace: {namespace}
spec:
{top}  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {{note: ""}}
    spec:
      dnsPolicy: ""
      hostNetwork: false
      hostPID: false
      hostIPC: false
      priorityClassName: ""
      subdomain: ""
      automountServiceAccountToken: false
      securityContext:
        runAsUser: 0
        seLinuxOptions: {{level: ""}}
      nodeSelector: {{zone: ""}}
      tolerations:
        - {{key: k, operator: Exists, effect: ""}}
      imagePullSecrets: []
      initContainers:
        - name: init
          image: busybox:1
          tty: false
      containers:
        - name: app
          image: nginx:1.0
          imagePullPolicy: ""
          tty: false
          stdin: false
          workingDir: ""
          command: []
          resources: {{limits: {{}}}}
          ports:
            - {{containerPort: 80, hostPort: 0, protocol: ""}}
          env:
            - {{name: A, value: ""}}
            - name: B
              valueFrom: {{configMapKeyRef: {{name: cm, key: k, optional: false}}}}
          volumeMounts:
            - {{name: data, mountPath: /data, readOnly: false, subPath: ""}}
          readinessProbe:
            tcpSocket: {{port: 80, host: ""}}
            initialDelaySeconds: 0
            timeoutSeconds: 0
            periodSeconds: 0
          securityContext:
            allowPrivilegeEscalation: false
            runAsUser: 0
      volumes:
        - name: data
          emptyDir: {{medium: ""}}
"#
    )
}

const POD: &str = "spec.template.spec";
const APP: &str = "spec.template.spec.containers[0]";

/// One `kubectl edit` of a field: the object (kind, name), the sed script the EDITOR runs on
/// the object as kubectl shows it (`kubectl get -o yaml`: keys sorted, the zeros the API
/// server leaves out absent), the paths the audit must then report, and whether applying the
/// same manifest again leaves the edit in place (kubectl sends nothing that undoes it).
struct Edit {
    kind: &'static str,
    name: &'static str,
    sed: &'static str,
    paths: Vec<String>,
    outlives_apply: bool,
}

fn edits() -> Vec<Edit> {
    let edit = |kind, name, sed, paths: &[String]| Edit {
        kind,
        name,
        sed,
        paths: paths.to_vec(),
        outlives_apply: false,
    };
    let lasting = |kind, name, sed, paths: &[String]| Edit {
        outlives_apply: true,
        ..edit(kind, name, sed, paths)
    };
    let at = |path: &str| path.to_owned();
    vec![
        // Zeros the API server leaves out, set to another value.
        edit(
            "Deployment",
            "paused",
            r"/^  progressDeadlineSeconds: /a\  paused: true",
            &[at("spec.paused")],
        ),
        edit(
            "Deployment",
            "min-ready",
            r"/^  progressDeadlineSeconds: /a\  minReadySeconds: 5",
            &[at("spec.minReadySeconds")],
        ),
        edit(
            "StatefulSet",
            "sts-min-ready",
            r"/^  podManagementPolicy: /a\  minReadySeconds: 5",
            &[at("spec.minReadySeconds")],
        ),
        edit(
            "DaemonSet",
            "ds-min-ready",
            r"/^  revisionHistoryLimit: /a\  minReadySeconds: 5",
            &[at("spec.minReadySeconds")],
        ),
        // (A pod template's ports get no hostPort from hostNetwork: only a Pod's are defaulted.)
        edit(
            "DaemonSet",
            "ds-host-network",
            r"/^      dnsPolicy: /a\      hostNetwork: true",
            &[format!("{POD}.hostNetwork")],
        ),
        edit(
            "Deployment",
            "host-pid",
            r"/^      dnsPolicy: /a\      hostPID: true",
            &[format!("{POD}.hostPID")],
        ),
        edit(
            "DaemonSet",
            "ds-host-ipc",
            r"/^      dnsPolicy: /a\      hostIPC: true",
            &[format!("{POD}.hostIPC")],
        ),
        edit(
            "Deployment",
            "subdomain",
            r"/^      dnsPolicy: /a\      subdomain: web",
            &[format!("{POD}.subdomain")],
        ),
        edit(
            "Deployment",
            "priority-class",
            r"/^      dnsPolicy: /a\      priorityClassName: high",
            &[format!("{POD}.priorityClassName")],
        ),
        edit(
            "Deployment",
            "se-linux",
            r"s/^        seLinuxOptions: {}$/        seLinuxOptions:\n          level: s0:c1/",
            &[format!("{POD}.securityContext.seLinuxOptions.level")],
        ),
        edit(
            "Deployment",
            "toleration",
            r"/^      - key: k$/a\        effect: NoSchedule",
            &[format!("{POD}.tolerations[0].effect")],
        ),
        edit(
            "Deployment",
            "medium",
            r"s/^      - emptyDir: {}$/      - emptyDir:\n          medium: Memory/",
            &[format!("{POD}.volumes[0].emptyDir.medium")],
        ),
        edit(
            "Deployment",
            "init-tty",
            r"/^        name: init$/a\        tty: true",
            &[format!("{POD}.initContainers[0].tty")],
        ),
        edit(
            "Deployment",
            "tty",
            r"/^        name: app$/a\        tty: true",
            &[format!("{APP}.tty")],
        ),
        edit(
            "StatefulSet",
            "sts-stdin",
            r"/^        name: app$/a\        stdin: true",
            &[format!("{APP}.stdin")],
        ),
        edit(
            "Deployment",
            "working-dir",
            r"/^        name: app$/a\        workingDir: /srv",
            &[format!("{APP}.workingDir")],
        ),
        edit(
            "Deployment",
            "host-port",
            r"/^        - containerPort: 80$/a\          hostPort: 8080",
            &[format!("{APP}.ports[0].hostPort")],
        ),
        edit(
            "Deployment",
            "env-value",
            r"/^        - name: A$/a\          value: set",
            &[format!("{APP}.env[0].value")],
        ),
        edit(
            "Deployment",
            "read-only",
            r"/^        - mountPath: \/data$/a\          readOnly: true",
            &[format!("{APP}.volumeMounts[0].readOnly")],
        ),
        edit(
            "DaemonSet",
            "ds-sub-path",
            r"/^        - mountPath: \/data$/a\          subPath: sub",
            &[format!("{APP}.volumeMounts[0].subPath")],
        ),
        edit(
            "Deployment",
            "probe-delay",
            r"/^        readinessProbe:$/a\          initialDelaySeconds: 5",
            &[format!("{APP}.readinessProbe.initialDelaySeconds")],
        ),
        edit(
            "Deployment",
            "probe-host",
            r"/^          tcpSocket:$/a\            host: localhost",
            &[format!("{APP}.readinessProbe.tcpSocket.host")],
        ),
        // A zero the defaulting replaced declares nothing; changed with kubectl edit, it is an
        // imperative edit (reference §8 step 3).
        edit(
            "Deployment",
            "pull-policy",
            r"0,/imagePullPolicy: IfNotPresent/s//imagePullPolicy: Always/",
            &[format!("{APP}.imagePullPolicy")],
        ),
        // Empty lists and maps declare nothing (§4 absent): set, they are imperative edits.
        // kubectl's apply sends a declared `command: []` (a list it replaces whole), so the
        // same manifest applied again undoes that edit; an empty map it sends as nothing.
        edit(
            "Deployment",
            "command",
            r"/^        name: app$/a\        command: [sleep, infinity]",
            &[format!("{APP}.command")],
        ),
        lasting(
            "Deployment",
            "limits",
            r#"0,/^        resources: {}$/s//        resources:\n          limits:\n            cpu: "1"/"#,
            &[format!("{APP}.resources.limits.cpu")],
        ),
        // A field the manifest does not declare: kubectl's apply leaves it, and its finding.
        lasting(
            "Deployment",
            "hostname",
            r"/^      dnsPolicy: /a\      hostname: web-0",
            &[format!("{POD}.hostname")],
        ),
        // Zeros the API server keeps: changed, or removed (absent means something else).
        edit(
            "Deployment",
            "automount",
            r"s/automountServiceAccountToken: false/automountServiceAccountToken: true/",
            &[format!("{POD}.automountServiceAccountToken")],
        ),
        edit(
            "Deployment",
            "escalation",
            r"/allowPrivilegeEscalation: false/d",
            &[format!("{APP}.securityContext.allowPrivilegeEscalation")],
        ),
        edit(
            "Deployment",
            "run-as-user",
            r"s/^        runAsUser: 0$/        runAsUser: 1000/",
            &[format!("{POD}.securityContext.runAsUser")],
        ),
        edit(
            "Deployment",
            "optional",
            r"s/optional: false/optional: true/",
            &[format!("{APP}.env[1].valueFrom.configMapKeyRef.optional")],
        ),
        edit(
            "Deployment",
            "note",
            r#"s/^        note: ""$/        note: set/"#,
            &[at("spec.template.metadata.annotations.note")],
        ),
    ]
}

/// `kubectl edit` with an EDITOR script that runs `sed` on the object.
fn kubectl_edit(env: &Env, dir: &Path, object: &str, sed: &str) {
    let editor = dir.join(format!("edit-{}.sh", object.replace('/', "-")));
    let script = dir.join(format!("edit-{}.sed", object.replace('/', "-")));
    std::fs::write(&script, format!("{sed}\n")).unwrap();
    std::fs::write(
        &editor,
        format!("#!/bin/sh\nsed -i -f '{}' \"$1\"\n", script.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = env
        .cluster
        .kubectl_command()
        .args(["edit", object, "-n", NS])
        .env("EDITOR", &editor)
        .output()
        .expect("kubectl edit");
    assert!(
        output.status.success(),
        "kubectl edit {object} ({sed}): {}",
        stderr(&output)
    );
    assert!(
        !format!("{}{}", stdout(&output), stderr(&output)).contains("Edit cancelled"),
        "kubectl edit {object} changed nothing ({sed})"
    );
}

/// `drift-sentinel audit --once` against the cluster (every namespace: other tests' objects
/// may drift too, so the exit code is not this test's).
fn agent_audit(env: &Env) -> Output {
    let _auditing = crate::env::auditing();
    Command::new(env!("CARGO_BIN_EXE_drift-sentinel"))
        .args(["audit", "--once", "--audit-reports", "none", "--kubeconfig"])
        .arg(env.cluster.admin_kubeconfig())
        .arg("--record-signing-key")
        .arg(env.record_key())
        // Its rules are cluster rules as the chart's agent's are (reference §2).
        .args(["--pod-namespace", AGENT_NAMESPACE])
        .output()
        .expect("run drift-sentinel audit")
}

/// `kubectl drift audit -n NS`, through the real kubectl.
fn plugin_audit(env: &Env) -> Output {
    crate::plugin::kubectl_drift(env, &["audit", "-n", NS])
}

/// The drifted objects of this test's namespace in an audit's text (`drifted KIND NS/NAME (…)`,
/// then `  PATH: declared → live …`), by `Kind/name`, with their paths.
fn drifted(output: &Output) -> BTreeMap<String, Vec<String>> {
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "audit failed: {}",
        stderr(output)
    );
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in stdout(output).lines() {
        if let Some(rest) = line.strip_prefix("drifted ") {
            // `apps/v1 Deployment e2e-zeros/paused (rule …)`
            let words: Vec<&str> = rest.split_whitespace().collect();
            current = words
                .get(2)
                .and_then(|o| o.strip_prefix(&format!("{NS}/")))
                .map(|name| format!("{}/{name}", words[1]));
            if let Some(object) = &current {
                found.entry(object.clone()).or_default();
            }
        } else if line.starts_with("  who: ") {
            // Who made the change and why (reference §8 "Who and why"): not a changed path.
        } else if let (Some(object), Some(change)) = (&current, line.strip_prefix("  ")) {
            let path = change.split_once(": ").map_or(change, |(path, _)| path);
            found.get_mut(object).unwrap().push(path.to_owned());
        } else {
            current = None;
        }
    }
    found
}

/// The audit's findings in this namespace, by both `drift-sentinel audit --once` and
/// `kubectl drift audit`, which must agree.
fn findings(env: &Env) -> BTreeMap<String, Vec<String>> {
    let agent = drifted(&agent_audit(env));
    let plugin_output = plugin_audit(env);
    let plugin = drifted(&plugin_output);
    assert_eq!(
        agent, plugin,
        "drift-sentinel audit and kubectl drift audit"
    );
    let expected_exit = if plugin.is_empty() { 0 } else { 1 };
    crate::env::assert_exit(&plugin_output, expected_exit);
    agent
}

fn zeros_as_applied_are_clean_and_edits_of_them_are_drift() {
    let env = shared();
    let dir = tempfile::tempdir().unwrap();
    env.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n  labels:\n    drift-sentinel.k8s.io/enabled: \"false\"\n"
    ));
    env.rule(
        "zeros-e2e",
        &format!(
            "mode: enforce\npriority: 1000\nnamespaces: [{NS}]\nselectors: [{{apiGroup: apps, kind: Deployment}}, {{apiGroup: apps, kind: StatefulSet}}, {{apiGroup: apps, kind: DaemonSet}}]\n"
        ),
    );
    let edits = edits();
    let mut objects: Vec<(&str, &str)> = vec![
        ("Deployment", "as-applied"),
        ("StatefulSet", "sts-as-applied"),
        ("DaemonSet", "ds-as-applied"),
    ];
    objects.extend(edits.iter().map(|e| (e.kind, e.name)));
    let manifests: Vec<String> = objects
        .iter()
        .map(|(kind, name)| manifest(NS, kind, name))
        .collect();
    let all = manifests.join("---\n");
    env.apply(&all);

    // Applied and never touched: clean, every kind, whatever zeros the manifests spell out.
    let applied = findings(&env);
    assert!(
        applied.is_empty(),
        "drift reported as applied: {applied:#?}"
    );

    for edit in &edits {
        kubectl_edit(
            &env,
            dir.path(),
            &format!("{}/{}", edit.kind.to_lowercase(), edit.name),
            edit.sed,
        );
    }
    let edited = findings(&env);
    let want: BTreeMap<String, Vec<String>> = edits
        .iter()
        .map(|e| (format!("{}/{}", e.kind, e.name), e.paths.clone()))
        .collect();
    assert_eq!(edited, want, "what kubectl edit changed, and only that");

    // The same manifests applied again: a finding goes away only with its drift, that is when
    // the field is again what the never-touched twin of the object holds. kubectl's three-way
    // merge sends every declared value that differs live (a zero too), so those edits are
    // undone; the others stay, and so do their findings.
    env.apply(&all);
    let reapplied = findings(&env);
    for edit in &edits {
        let object = format!("{}/{}", edit.kind, edit.name);
        if reapplied.get(&object) == Some(&edit.paths) {
            continue; // still reported: still drifted
        }
        assert!(
            !edit.outlives_apply,
            "{object}: the finding went away, but kubectl apply leaves this edit: {reapplied:#?}"
        );
        let get = |name: &str| {
            env.get(&[&edit.kind.to_lowercase(), name, "-n", NS])
                .expect("the object")
        };
        let twin = match edit.kind {
            "Deployment" => "as-applied",
            "StatefulSet" => "sts-as-applied",
            _ => "ds-as-applied",
        };
        let (live, untouched) = (get(edit.name), get(twin));
        for path in &edit.paths {
            let pointer = pointer_of(path);
            assert_eq!(
                live.pointer(&pointer),
                untouched.pointer(&pointer),
                "{object}: the finding at {path} went away, but the field is not as applied"
            );
        }
    }
    let lasting: BTreeMap<String, Vec<String>> = edits
        .iter()
        .filter(|e| e.outlives_apply)
        .map(|e| (format!("{}/{}", e.kind, e.name), e.paths.clone()))
        .collect();
    assert_eq!(
        reapplied, lasting,
        "after the manifests were applied again: exactly the edits kubectl apply leaves"
    );
}

/// `spec.template.spec.containers[0].tty` as a JSON pointer.
fn pointer_of(path: &str) -> String {
    path.split('.')
        .flat_map(|part| {
            let (key, index) = match part.split_once('[') {
                Some((key, index)) => (key, Some(index.trim_end_matches(']'))),
                None => (part, None),
            };
            std::iter::once(key.to_owned()).chain(index.map(str::to_owned))
        })
        .fold(String::new(), |pointer, part| format!("{pointer}/{part}"))
}

fn an_apply_spelling_out_zeros_over_a_server_side_apply_is_allowed() {
    let env = shared();
    // A namespace the webhook intercepts, under the chart's default rule (enforce: only images
    // and kubectl's own annotations may change).
    let ns = env.namespace("e2e-zeros-admission", &[]);
    // Without `protocol: ""`: kubectl's client-side merge keys ports by containerPort alone,
    // and adds a second port next to the TCP one that server-side apply stored (the API server
    // warns of a duplicate port definition): a real change of the object, denied as such.
    let spelled = manifest(&ns, "Deployment", "web").replace(", protocol: \"\"}", "}");
    assert!(!spelled.contains("protocol"), "{spelled}");
    // The same object without the zeros the API server leaves out, server-side applied.
    let plain: String = spelled
        .lines()
        .filter(|line| {
            let trimmed = line.trim_start();
            ![
                "paused: false",
                "minReadySeconds: 0",
                "hostNetwork: false",
                "hostPID: false",
                "hostIPC: false",
                "priorityClassName: \"\"",
                "subdomain: \"\"",
                "tty: false",
                "stdin: false",
                "workingDir: \"\"",
                "imagePullSecrets: []",
                "command: []",
                "resources: {limits: {}}",
            ]
            .contains(&trimmed)
        })
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(plain, spelled);
    let output = env.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &plain);
    assert!(output.status.success(), "{}", stderr(&output));

    // Client-side apply of the manifest that spells them out: the webhook sees the object as
    // the API server's Go types write it, so only kubectl's own annotation changed.
    let output = env.kubectl_stdin(&["apply", "-f", "-"], &spelled);
    assert!(
        output.status.success(),
        "kubectl apply of spelled-out zeros was refused: {}",
        stderr(&output)
    );
    let live = env.get(&["deployment", "web", "-n", &ns]).unwrap();
    assert!(live["spec"].get("paused").is_none(), "{}", live["spec"]);
    assert!(
        live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .is_some_and(|a| a.contains("\"paused\":false")),
        "{live}"
    );
    // And the same again, server-side, by another field manager: the request spells the zeros
    // out too. (Server-side apply itself finds conflicts on them: "kubectl" applied them and the
    // live object holds nothing there; --force-conflicts takes them over.)
    let output = env.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "zeros",
            "-f",
            "-",
        ],
        &spelled,
    );
    assert!(output.status.success(), "{}", stderr(&output));

    // The webhook does judge this object: a zero changed to another value is denied.
    let output = env.kubectl_stdin(
        &["apply", "-f", "-"],
        &spelled.replace("paused: false", "paused: true"),
    );
    assert!(!output.status.success(), "paused: true was allowed");
    assert!(
        stderr(&output).contains("immutable fields changed: spec.paused"),
        "{}",
        stderr(&output)
    );
}
