//! §3: the scale subresource.

use crate::fixtures::*;

#[test]
fn scale_subresource() {
    let workloads = "selectors: [{apiGroup: apps, kind: Deployment}, {apiGroup: apps, kind: StatefulSet}, {apiGroup: apps, kind: ReplicaSet}, {apiGroup: argoproj.io, kind: Rollout}]";
    let env = Env::rules(
        &[
            (
                "ops",
                "scale-nolabels",
                format!("mode: dry-run\npriority: 5\nnamespaces: [scale-nolabels]\n{DEPLOY}\nlabels: []\n"),
            ),
            ("ops", "scale-strict", format!("mode: enforce\nnamespaces: [scale]\n{workloads}\n")),
            (
                "ops",
                "scale-labels",
                format!("mode: off\npriority: 10\nnamespaces: [scale]\n{DEPLOY}\nlabels: [app=web]\n"),
            ),
            (
                "ops",
                "scale-hpa",
                format!("mode: enforce\nnamespaces: [scale-hpa]\n{DEPLOY}\nmutable: [spec.replicas]\n"),
            ),
            (
                "ops",
                "scale-kind",
                "mode: enforce\nnamespaces: [scale-kind]\nselectors: [{apiGroup: autoscaling, kind: Scale}]\n".to_owned(),
            ),
            (
                "ops",
                "scale-scoped",
                format!("mode: enforce\nnamespaces: [scale-inc]\n{DEPLOY}\ninclude: [spec.template]\n"),
            ),
            (
                "ops",
                "scale-excluded",
                format!("mode: enforce\nnamespaces: [scale-exc, scale-warn]\n{DEPLOY}\nexclude: [metadata]\n"),
            ),
            (
                "ops",
                "scale-sts",
                "mode: enforce\nnamespaces: [scale-sts]\nselectors: [{apiGroup: apps, kind: StatefulSet}]\n".to_owned(),
            ),
        ],
        &[("scale-warn", Some("warn"))],
    );
    let labels = json!({"app": "web"});
    let s = |ns: &str, group: &str, version: &str, resource: &str, old: i64, new: i64| {
        scale_review(ns, group, version, resource, old, new, labels.clone())
    };
    env.run(vec![
        case(
            "scale to 0 as sent by the API server (replicas omitted)",
            {
                let mut review = s("scale", "apps", "v1", "deployments", 2, 0);
                review["request"]["object"]["spec"] = json!({});
                review
            },
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "scale from 0 as sent by the API server (replicas omitted)",
            {
                let mut review = s("scale", "apps", "v1", "deployments", 0, 2);
                review["request"]["oldObject"]["spec"] = json!({});
                review
            },
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "scale to 0",
            s("scale", "apps", "v1", "deployments", 2, 0),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "scale from 0",
            s("scale", "apps", "v1", "deployments", 0, 2),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "labels: [] is no label selector",
            s("scale-nolabels", "apps", "v1", "deployments", 2, 5),
            would_deny("ops/scale-nolabels", "spec.replicas"),
        ),
        case(
            "deployments/scale, labels rule skipped offline",
            s("scale", "apps", "v1", "deployments", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "statefulsets/scale",
            s("scale", "apps", "v1", "statefulsets", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "replicasets/scale",
            s("scale", "apps", "v1", "replicasets", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "rollouts.argoproj.io/scale",
            s("scale", "argoproj.io", "v1alpha1", "rollouts", 2, 5),
            deny("ops/scale-strict", "spec.replicas"),
        ),
        case(
            "only spec.replicas can change",
            scale_review(
                "scale",
                "apps",
                "v1",
                "deployments",
                2,
                2,
                json!({"app": "web", "other": "x"}),
            ),
            allow("ops/scale-strict", "enforce"),
        ),
        case(
            "spec.replicas mutable",
            s("scale-hpa", "apps", "v1", "deployments", 2, 5),
            allow("ops/scale-hpa", "enforce"),
        ),
        case(
            "matched by the parent kind, not Scale",
            s("scale-kind", "apps", "v1", "deployments", 2, 5),
            no_rule(),
        ),
        case(
            "parent kind Deployment does not match a StatefulSet rule",
            s("scale-sts", "apps", "v1", "deployments", 2, 5),
            no_rule(),
        ),
        case(
            "include applies to the replicas change",
            s("scale-inc", "apps", "v1", "deployments", 2, 5),
            allow("ops/scale-scoped", "enforce"),
        ),
        case(
            "exclude of another subtree",
            s("scale-exc", "apps", "v1", "deployments", 2, 5),
            deny("ops/scale-excluded", "spec.replicas"),
        ),
        case(
            "namespace mode applies",
            s("scale-warn", "apps", "v1", "deployments", 2, 5),
            warned("ops/scale-excluded", "spec.replicas"),
        ),
        case(
            "parent kind StatefulSet",
            s("scale-sts", "apps", "v1", "statefulsets", 2, 5),
            deny("ops/scale-sts", "spec.replicas"),
        ),
    ]);
}
