//! Realistic objects for tests and benchmarks: a production-like Deployment as the API server
//! sends it (3 containers and an init container, probes, resources, managed fields, status),
//! with as many environment variables in its main container as a test wants, and the
//! AdmissionReview of an UPDATE of one into another. The engine's benchmarks, the agent's
//! black-box tests and the load benchmark (`drift-bench`) all build from here.

use serde_json::{Value, json};

/// The namespace of the realistic Deployment.
pub const NAMESPACE: &str = "prod-eu";

/// The images of the three containers before an image change.
pub const IMAGES: [&str; 3] = [
    "registry.example.com/api:1.4.2",
    "registry.example.com/worker:1.4.2",
    "envoyproxy/envoy:v1.30.1",
];
/// The same, the main container's image changed.
pub const NEW_IMAGES: [&str; 3] = [
    "registry.example.com/api:1.5.0",
    "registry.example.com/worker:1.4.2",
    "envoyproxy/envoy:v1.30.1",
];

/// One container with `env_count` environment variables.
/// A container's `env` list from (name, value) pairs.
pub fn env_list<N: AsRef<str>, V: AsRef<str>>(pairs: &[(N, V)]) -> Value {
    Value::Array(
        pairs
            .iter()
            .map(
                |(name, value)| serde_json::json!({"name": name.as_ref(), "value": value.as_ref()}),
            )
            .collect(),
    )
}

pub fn container(name: &str, image: &str, env_count: usize) -> Value {
    let env: Vec<Value> = (0..env_count)
        .map(|i| json!({"name": format!("{}_SETTING_{i:03}", name.to_uppercase()), "value": format!("value-{i}")}))
        .collect();
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--port=8080", "--log-format=json", "--metrics"],
        "ports": [
            {"name": "http", "containerPort": 8080, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}
        ],
        "env": env,
        "envFrom": [{"configMapRef": {"name": format!("{name}-config")}}],
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"}
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 1,
            "successThreshold": 1, "failureThreshold": 3
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTP"},
            "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3
        },
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app", "readOnly": true},
            {"name": "tmp", "mountPath": "/tmp"}
        ],
        "securityContext": {
            "runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    })
}

/// A Deployment as the API server sends it (namespace [`NAMESPACE`]), with `env_count`
/// variables in its main container.
pub fn deployment_with(images: [&str; 3], replicas: i64, env_count: usize) -> Value {
    let containers = vec![
        container("api", images[0], env_count),
        container("worker", images[1], 8),
        container("proxy", images[2], 4),
    ];
    let template_spec = json!({
        "serviceAccountName": "api",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "api"}}}}
        ]}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "api", "effect": "NoSchedule"}],
        "initContainers": [container("migrate", "registry.example.com/api-migrate:1.4.2", 6)],
        "imagePullSecrets": [{"name": "registry-credentials"}],
        "containers": containers,
        "volumes": [
            {"name": "config", "configMap": {"name": "api-config", "defaultMode": 420}},
            {"name": "tmp", "emptyDir": {}}
        ]
    });
    let spec = json!({
        "replicas": replicas,
        "revisionHistoryLimit": 10,
        "progressDeadlineSeconds": 600,
        "selector": {"matchLabels": {"app": "api"}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        "template": {
            "metadata": {"labels": {"app": "api", "version": "v1"}, "annotations": {"prometheus.io/scrape": "true"}},
            "spec": template_spec
        }
    });
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "api",
            "namespace": NAMESPACE,
            "uid": "6f1c9a57-3f0e-4c8a-9d0b-1c2b3a4d5e6f",
            "resourceVersion": "123456",
            "generation": 7,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "api", "team": "payments", "app.kubernetes.io/managed-by": "kubectl"},
            "annotations": {
                "deployment.kubernetes.io/revision": "7",
                "kubectl.kubernetes.io/last-applied-configuration": format!("{{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{{\"name\":\"api\"}},\"spec\":{{\"replicas\":{replicas}}}}}")
            },
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
                 "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                              "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {}}}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                 "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:replicas": {}, "f:conditions": {}}}}
            ]
        },
        "spec": spec,
        "status": {
            "observedGeneration": 7, "replicas": replicas, "updatedReplicas": replicas,
            "readyReplicas": replicas, "availableReplicas": replicas,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                 "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                 "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        }
    })
}

/// `object` as a client-side `kubectl apply` leaves it: its
/// `kubectl.kubernetes.io/last-applied-configuration` annotation holds the manifest (kind, name,
/// namespace, labels and spec) as JSON text, about as long as the spec.
pub fn with_last_applied(mut object: Value) -> Value {
    let manifest = json!({
        "apiVersion": object["apiVersion"],
        "kind": object["kind"],
        "metadata": {
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "labels": object["metadata"]["labels"],
        },
        "spec": object["spec"],
    });
    object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(format!("{manifest}\n"));
    object
}

/// An AdmissionReview for an UPDATE of `old` into `new` (a Deployment).
pub fn review(uid: &str, old: &Value, new: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": new["metadata"]["name"],
            "namespace": new["metadata"]["namespace"],
            "operation": "UPDATE",
            "userInfo": {"username": "alice@example.com", "uid": "u-alice", "groups": ["developers", "system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
        }
    })
}

/// A review (uid `uid`) by `alice` of Deployment `prod/web` whose one container's args differ
/// everywhere: `items` changed list items (`a0`… → `b0`…), and replicas 2 → 3 (denied where
/// replicas may not change): a decision's largest diff, for timing it.
pub fn args_review(uid: &str, items: usize) -> Value {
    let deployment = |prefix: &str, replicas: i64| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": "nginx",
                "args": (0..items).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>()}]}}}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "namespace": "prod", "name": "web", "operation": "UPDATE", "userInfo": {"username": "alice"},
        "object": deployment("b", 3), "oldObject": deployment("a", 2)}})
}

/// `levels` levels of lists (`maps: false`) or of single-key maps around `leaf`, as JSON text.
pub fn nested(levels: usize, leaf: &str, maps: bool) -> String {
    if maps {
        format!("{}{leaf}{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
    } else {
        format!("{}{leaf}{}", "[".repeat(levels), "]".repeat(levels))
    }
}

/// The text of a review (uid `uid`) of a Deployment whose objects nest exactly `depth` levels:
/// `spec.replicas` (two levels down) becomes `depth - 2` levels of lists or maps holding 3
/// before and 4 after — the input of reference §5, "No input stops the agent".
pub fn deep_review(uid: &str, depth: usize, maps: bool) -> String {
    let old = deployment_with(["api:1", "worker:1", "proxy:1"], 3, 4);
    let new = deployment_with(["api:1", "worker:1", "proxy:1"], 4, 4);
    let body = review(uid, &old, &new).to_string();
    let levels = depth.saturating_sub(2);
    let body = body.replacen(
        r#""replicas":4"#,
        &format!(r#""replicas":{}"#, nested(levels, "4", maps)),
        1,
    );
    body.replacen(
        r#""replicas":3"#,
        &format!(r#""replicas":{}"#, nested(levels, "3", maps)),
        1,
    )
}

/// `object` (with a `last-applied-configuration` baseline and managedFields) renamed `name`, its
/// baseline too, carrying the bypass annotation `value` set by `kubectl-annotate` at `set_at`
/// (RFC 3339), as `kubectl annotate` leaves it: the audit's bypass listings read who set it from
/// that managedFields entry.
pub fn with_bypass(object: &Value, name: &str, value: &str, set_at: &str) -> Value {
    let mut object = object.clone();
    object["metadata"]["name"] = json!(name);
    let annotations = &mut object["metadata"]["annotations"];
    let key = "kubectl.kubernetes.io/last-applied-configuration";
    let mut declared: Value =
        serde_json::from_str(annotations[key].as_str().expect("a baseline")).expect("JSON");
    declared["metadata"]["name"] = json!(name);
    annotations[key] = json!(declared.to_string());
    annotations["drift-sentinel.k8s.io/bypass"] = json!(value);
    object["metadata"]["managedFields"]
        .as_array_mut()
        .expect("managedFields")
        .push(json!({
            "manager": "kubectl-annotate", "operation": "Update", "apiVersion": "apps/v1",
            "time": set_at, "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:drift-sentinel.k8s.io/bypass": {}}}}
        }));
    object
}
