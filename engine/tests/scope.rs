//! `include`, `exclude` and `mutable` patterns shorter than, equal to and longer than the
//! changed path (reference §4: a pattern covers a path when it matches the path or an ancestor; one
//! that reaches *below* a scalar says nothing about it), through `*`, `[*]`, `['key']` and
//! indices. Table-driven through the public decision.

use drift_engine::review::AdmissionRequest;
use drift_engine::{Context, Detail, RuleId, RuleSet, RuleSource, SpecText, Step, evaluate};
use serde_json::{Value, json};

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod", "annotations": {"example.com/a": "x"}},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"annotations": {"team": "a"}},
                "spec": {
                    "serviceAccountName": "web",
                    "containers": [{"name": "app", "image": "app:1", "resources": {"limits": {"cpu": "1"}}}]
                }
            }
        }
    })
}

/// What an edit changes.
#[derive(Clone, Copy)]
enum Edit {
    Replicas,
    ServiceAccount,
    Image,
    Annotation,
    Name,
}

fn edited(edit: Edit) -> Value {
    let mut new = deployment();
    match edit {
        Edit::Replicas => new["spec"]["replicas"] = json!(5),
        Edit::ServiceAccount => new["spec"]["template"]["spec"]["serviceAccountName"] = json!("x"),
        Edit::Image => new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2"),
        Edit::Annotation => new["metadata"]["annotations"]["example.com/a"] = json!("y"),
        Edit::Name => new["metadata"]["name"] = json!("web2"),
    }
    new
}

/// The verdict expected: the step, and for a violation the denied paths.
enum Expect {
    NoChanges,
    OnlyMutable,
    Denied(&'static [&'static str]),
}

fn judge(field: &str, patterns: &[&str], edit: Edit) -> (Step, Vec<String>) {
    let spec = json!({
        "mode": "enforce", "namespaces": ["*"],
        "selectors": [{"apiGroup": "apps", "kind": "Deployment"}],
        field: patterns,
    })
    .to_string();
    let rules = RuleSet::build([RuleSource {
        id: RuleId {
            namespace: "platform".into(),
            name: "rule".into(),
        },
        spec: SpecText::Yaml(spec),
        origin: None,
    }]);
    assert!(rules.invalid().is_empty(), "{:?}", rules.invalid());
    let request: AdmissionRequest = serde_json::from_value(json!({
        "uid": "u", "operation": "UPDATE", "namespace": "prod", "name": "web",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "userInfo": {"username": "alice"},
        "object": edited(edit), "oldObject": deployment(),
    }))
    .expect("request");
    let evaluation = evaluate(
        &rules,
        &request,
        &Context::at(std::time::SystemTime::UNIX_EPOCH),
        Detail::Verdict,
    );
    (evaluation.step(), evaluation.denied_paths().to_vec())
}

#[test]
fn patterns_shorter_equal_and_longer_than_the_changed_path() {
    use Edit::*;
    use Expect::*;
    let cases: &[(&str, &str, &[&str], Edit, Expect)] = &[
        // The two cases of the issue that found the bug.
        (
            "exclude reaching into the template keeps spec.replicas",
            "exclude",
            &["spec.*.metadata.annotations"],
            Replicas,
            Denied(&["spec.replicas"]),
        ),
        (
            "exclude of every container list's resources keeps the service account",
            "exclude",
            &["spec.template.spec.*[*].resources"],
            ServiceAccount,
            Denied(&["spec.template.spec.serviceAccountName"]),
        ),
        (
            "exclude below metadata keeps metadata.name",
            "exclude",
            &["metadata.*.x"],
            Name,
            Denied(&["metadata.name"]),
        ),
        (
            "exclude below each container's lists keeps the image",
            "exclude",
            &["spec.template.spec.containers[*].*[*]"],
            Image,
            Denied(&["spec.template.spec.containers[0].image"]),
        ),
        // exclude: shorter, equal, longer.
        ("exclude shorter", "exclude", &["spec"], Replicas, NoChanges),
        (
            "exclude equal",
            "exclude",
            &["spec.replicas"],
            Replicas,
            NoChanges,
        ),
        (
            "exclude longer",
            "exclude",
            &["spec.replicas.x"],
            Replicas,
            Denied(&["spec.replicas"]),
        ),
        (
            "exclude * equal",
            "exclude",
            &["spec.*"],
            Replicas,
            NoChanges,
        ),
        (
            "exclude * first",
            "exclude",
            &["*.replicas"],
            Replicas,
            NoChanges,
        ),
        (
            "exclude * longer",
            "exclude",
            &["spec.*.x"],
            Replicas,
            Denied(&["spec.replicas"]),
        ),
        (
            "exclude [*] shorter",
            "exclude",
            &["spec.template.spec.containers[*]"],
            Image,
            NoChanges,
        ),
        (
            "exclude [*] equal",
            "exclude",
            &["spec.template.spec.containers[*].image"],
            Image,
            NoChanges,
        ),
        (
            "exclude [*] longer",
            "exclude",
            &["spec.template.spec.containers[*].image[*]"],
            Image,
            Denied(&["spec.template.spec.containers[0].image"]),
        ),
        (
            "exclude index shorter",
            "exclude",
            &["spec.template.spec.containers[0]"],
            Image,
            NoChanges,
        ),
        (
            "exclude other index",
            "exclude",
            &["spec.template.spec.containers[1]"],
            Image,
            Denied(&["spec.template.spec.containers[0].image"]),
        ),
        (
            "exclude index longer",
            "exclude",
            &["spec.template.spec.containers[0].image[0]"],
            Image,
            Denied(&["spec.template.spec.containers[0].image"]),
        ),
        (
            "exclude quoted key equal",
            "exclude",
            &["metadata.annotations['example.com/a']"],
            Annotation,
            NoChanges,
        ),
        (
            "exclude quoted key longer",
            "exclude",
            &["metadata.annotations['example.com/a'].x"],
            Annotation,
            Denied(&["metadata.annotations['example.com/a']"]),
        ),
        // include: shorter, equal, longer (the mirror image: reaching below selects nothing).
        (
            "include shorter",
            "include",
            &["spec"],
            Replicas,
            Denied(&["spec.replicas"]),
        ),
        (
            "include equal",
            "include",
            &["spec.replicas"],
            Replicas,
            Denied(&["spec.replicas"]),
        ),
        (
            "include longer",
            "include",
            &["spec.replicas.x"],
            Replicas,
            NoChanges,
        ),
        (
            "include * longer",
            "include",
            &["spec.*.x"],
            Replicas,
            NoChanges,
        ),
        (
            "include [*] equal",
            "include",
            &["spec.template.spec.containers[*].image"],
            Image,
            Denied(&["spec.template.spec.containers[0].image"]),
        ),
        (
            "include [*] longer",
            "include",
            &["spec.template.spec.containers[*].image.x"],
            Image,
            NoChanges,
        ),
        (
            "include index longer",
            "include",
            &["spec.template.spec.containers[0].image[0]"],
            Image,
            NoChanges,
        ),
        (
            "include quoted key longer",
            "include",
            &["metadata.annotations['example.com/a'].x"],
            Annotation,
            NoChanges,
        ),
        (
            "include elsewhere",
            "include",
            &["spec.template"],
            Replicas,
            NoChanges,
        ),
        // mutable: shorter, equal, longer (reaching below a scalar never covers it).
        (
            "mutable shorter",
            "mutable",
            &["spec"],
            Replicas,
            OnlyMutable,
        ),
        (
            "mutable equal",
            "mutable",
            &["spec.replicas"],
            Replicas,
            OnlyMutable,
        ),
        (
            "mutable longer",
            "mutable",
            &["spec.replicas.x"],
            Replicas,
            Denied(&["spec.replicas"]),
        ),
        (
            "mutable * equal",
            "mutable",
            &["spec.*"],
            Replicas,
            OnlyMutable,
        ),
        (
            "mutable * longer",
            "mutable",
            &["spec.*.x"],
            Replicas,
            Denied(&["spec.replicas"]),
        ),
        (
            "mutable [*] equal",
            "mutable",
            &["spec.template.spec.containers[*].image"],
            Image,
            OnlyMutable,
        ),
        (
            "mutable [*] longer",
            "mutable",
            &["spec.template.spec.containers[*].image[*]"],
            Image,
            Denied(&["spec.template.spec.containers[0].image"]),
        ),
        (
            "mutable index equal",
            "mutable",
            &["spec.template.spec.containers[0].image"],
            Image,
            OnlyMutable,
        ),
        (
            "mutable other index",
            "mutable",
            &["spec.template.spec.containers[1].image"],
            Image,
            Denied(&["spec.template.spec.containers[0].image"]),
        ),
        (
            "mutable quoted key equal",
            "mutable",
            &["metadata.annotations['example.com/a']"],
            Annotation,
            OnlyMutable,
        ),
        (
            "mutable quoted key longer",
            "mutable",
            &["metadata.annotations['example.com/a'].x"],
            Annotation,
            Denied(&["metadata.annotations['example.com/a']"]),
        ),
    ];
    let mut failures = Vec::new();
    for (name, field, patterns, edit, expect) in cases {
        let (step, denied) = judge(field, patterns, *edit);
        let ok = match expect {
            NoChanges => step == Step::NoChanges,
            OnlyMutable => step == Step::OnlyMutable,
            Denied(paths) => step == Step::Violation && denied == *paths,
        };
        if !ok {
            failures.push(format!(
                "{name}: {field} {patterns:?} gave {step:?} {denied:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
