//! The table of omitted zeros, read as the diff reads it.

use super::*;
use crate::PathPattern;
use serde_json::json;

/// The segments of a concrete path (`spec.template.spec.containers[0].tty`).
fn segments(path: &str) -> Vec<crate::PathSegment> {
    PathPattern::parse(path)
        .unwrap()
        .segments()
        .iter()
        .map(|s| match s {
            crate::PatternSegment::Key(key) => crate::PathSegment::Key(key.clone()),
            crate::PatternSegment::Index(i) => crate::PathSegment::Index(*i),
            other => panic!("not a concrete path: {other:?}"),
        })
        .collect()
}

fn omits(kind: &str, path: &str, value: Value) -> bool {
    let group = if kind == "Rollout" {
        "argoproj.io"
    } else {
        "apps"
    };
    OmittedZeros::of_kind(group, kind).omits(&segments(path), &value)
}

#[test]
fn every_kind_the_rules_select_is_known() {
    for (group, kind) in [
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("argoproj.io", "Rollout"),
    ] {
        assert!(OmittedZeros::of_kind(group, kind).is_known(), "{kind}");
    }
    assert!(!OmittedZeros::of_kind("", "ConfigMap").is_known());
    assert!(!OmittedZeros::of_kind("example.com", "Deployment").is_known());
    assert!(!OmittedZeros::NONE.omits(&[crate::PathSegment::Key("paused".into())], &json!(false)));
}

#[test]
fn the_table_is_sorted_for_binary_search() {
    fn check(object: &'static Object, seen: &mut Vec<*const Object>) {
        if seen.contains(&(object as *const Object)) {
            return;
        }
        seen.push(object);
        assert!(
            object.fields.windows(2).all(|w| w[0].name < w[1].name),
            "{:?}",
            object.fields.iter().map(|f| f.name).collect::<Vec<_>>()
        );
        for field in object.fields {
            if let Nested::Object(o) | Nested::ListOf(o) | Nested::MapOf(o) = field.nested {
                check(o, seen);
            }
        }
    }
    let mut seen = Vec::new();
    for kind in table::KINDS {
        check(kind.object, &mut seen);
    }
    assert!(seen.len() > 50, "{} structs", seen.len());
}

/// What the API server leaves out, and what it keeps, at several depths of each kind.
#[test]
fn zeros_left_out_and_kept() {
    let pod = "spec.template.spec";
    let container = "spec.template.spec.containers[0]";
    let cases: &[(&str, String, Value, bool)] = &[
        // Value-typed omitempty fields: left out at zero.
        ("Deployment", "spec.paused".into(), json!(false), true),
        ("Deployment", "spec.minReadySeconds".into(), json!(0), true),
        (
            "Deployment",
            "spec.minReadySeconds".into(),
            json!(0.0),
            true,
        ),
        (
            "Deployment",
            "spec.minReadySeconds".into(),
            json!(-0.0),
            true,
        ),
        ("StatefulSet", "spec.minReadySeconds".into(), json!(0), true),
        ("DaemonSet", "spec.minReadySeconds".into(), json!(0), true),
        ("Rollout", "spec.paused".into(), json!(false), true),
        (
            "Rollout",
            "spec.progressDeadlineAbort".into(),
            json!(false),
            true,
        ),
        (
            "Deployment",
            format!("{pod}.hostNetwork"),
            json!(false),
            true,
        ),
        ("DaemonSet", format!("{pod}.hostPID"), json!(false), true),
        ("Rollout", format!("{pod}.hostIPC"), json!(false), true),
        (
            "Deployment",
            format!("{pod}.priorityClassName"),
            json!(""),
            true,
        ),
        ("Deployment", format!("{container}.tty"), json!(false), true),
        (
            "StatefulSet",
            format!("{container}.stdin"),
            json!(false),
            true,
        ),
        (
            "Deployment",
            format!("{container}.workingDir"),
            json!(""),
            true,
        ),
        (
            "Deployment",
            format!("{pod}.initContainers[2].stdinOnce"),
            json!(false),
            true,
        ),
        (
            "Deployment",
            format!("{container}.volumeMounts[1].readOnly"),
            json!(false),
            true,
        ),
        (
            "Rollout",
            format!("{container}.volumeMounts[0].subPath"),
            json!(""),
            true,
        ),
        (
            "Deployment",
            format!("{container}.env[3].value"),
            json!(""),
            true,
        ),
        (
            "Deployment",
            format!("{container}.ports[0].hostPort"),
            json!(0),
            true,
        ),
        (
            "Deployment",
            format!("{container}.readinessProbe.initialDelaySeconds"),
            json!(0),
            true,
        ),
        (
            "StatefulSet",
            format!("{container}.livenessProbe.httpGet.host"),
            json!(""),
            true,
        ),
        (
            "Deployment",
            format!("{pod}.volumes[0].configMap.name"),
            json!(""),
            true,
        ),
        (
            "StatefulSet",
            "spec.volumeClaimTemplates[0].spec.volumeName".into(),
            json!(""),
            true,
        ),
        ("Deployment", "metadata.namespace".into(), json!(""), true),
        // An object of nothing but such zeros is left out as a whole.
        (
            "Deployment",
            format!("{container}.securityContext.seLinuxOptions"),
            json!({"user": "", "role": ""}),
            true,
        ),
        (
            "Deployment",
            format!("{pod}.volumes[0].emptyDir"),
            json!({"medium": ""}),
            true,
        ),
        // Any other value is kept.
        ("Deployment", "spec.paused".into(), json!(true), false),
        ("Deployment", "spec.minReadySeconds".into(), json!(5), false),
        (
            "Deployment",
            "spec.minReadySeconds".into(),
            json!(1e-300),
            false,
        ),
        (
            "Deployment",
            "spec.minReadySeconds".into(),
            json!("0"),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.hostNetwork"),
            json!("false"),
            false,
        ),
        (
            "Deployment",
            format!("{container}.workingDir"),
            json!(" "),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.volumes[0].emptyDir"),
            json!({"medium": "Memory"}),
            false,
        ),
        // Pointer fields keep their zero: absent means something else.
        (
            "Deployment",
            format!("{pod}.automountServiceAccountToken"),
            json!(false),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.enableServiceLinks"),
            json!(false),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.shareProcessNamespace"),
            json!(false),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.hostUsers"),
            json!(false),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.securityContext.runAsUser"),
            json!(0),
            false,
        ),
        (
            "Deployment",
            format!("{container}.securityContext.runAsUser"),
            json!(0),
            false,
        ),
        (
            "Deployment",
            format!("{container}.securityContext.allowPrivilegeEscalation"),
            json!(false),
            false,
        ),
        (
            "Deployment",
            format!("{container}.securityContext.privileged"),
            json!(false),
            false,
        ),
        (
            "Deployment",
            format!("{container}.env[0].valueFrom.configMapKeyRef.optional"),
            json!(false),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.terminationGracePeriodSeconds"),
            json!(0),
            false,
        ),
        ("Deployment", "spec.replicas".into(), json!(0), false),
        (
            "Deployment",
            "spec.revisionHistoryLimit".into(),
            json!(0),
            false,
        ),
        (
            "Deployment",
            "spec.progressDeadlineSeconds".into(),
            json!(0),
            false,
        ),
        ("Rollout", "spec.replicas".into(), json!(0), false),
        // Fields without omitempty are always written, zero or not.
        (
            "Deployment",
            format!("{container}.ports[0].containerPort"),
            json!(0),
            false,
        ),
        ("Deployment", format!("{container}.name"), json!(""), false),
        ("StatefulSet", "spec.serviceName".into(), json!(""), false),
        (
            "Deployment",
            format!("{container}.env[0].name"),
            json!(""),
            false,
        ),
        // Map values and list elements are kept whatever they hold.
        (
            "Deployment",
            "metadata.labels.tier".into(),
            json!(""),
            false,
        ),
        (
            "Deployment",
            "spec.template.metadata.annotations.note".into(),
            json!(""),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.nodeSelector.disk"),
            json!(""),
            false,
        ),
        (
            "Deployment",
            format!("{container}.args[0]"),
            json!(""),
            false,
        ),
        (
            "Deployment",
            format!("{container}.resources.limits.cpu"),
            json!("0"),
            false,
        ),
        (
            "Deployment",
            format!("{pod}.containers[0]"),
            json!({}),
            false,
        ),
        // A path the table does not follow keeps everything.
        ("Deployment", "spec.nosuchfield".into(), json!(false), false),
        (
            "Deployment",
            "spec.paused.deeper".into(),
            json!(false),
            false,
        ),
        ("Deployment", "spec.template[0]".into(), json!(false), false),
    ];
    for (kind, path, value, want) in cases {
        assert_eq!(
            omits(kind, path, value.clone()),
            *want,
            "{kind} {path}: {value}"
        );
    }
}

#[test]
fn a_raw_number_is_zero_only_when_it_is_exactly_zero() {
    use crate::json::{Document as _, RawDocument};
    let path = [
        crate::PathSegment::Key("spec".into()),
        crate::PathSegment::Key("minReadySeconds".into()),
    ];
    let zeros = OmittedZeros::of_kind("apps", "Deployment");
    for (text, want) in [
        ("0", true),
        ("0.0", true),
        ("-0", true),
        ("0e10", true),
        ("1e-400", false),
        ("1", false),
    ] {
        let raw: &serde_json::value::RawValue = serde_json::from_str(text).unwrap();
        let document = RawDocument::new(raw);
        assert_eq!(zeros.omits(&path, document.node()), want, "{text}");
    }
}

/// The zeros kube-apiserver's defaulting replaces, found by running it: declared, they say
/// nothing about what is stored. A custom resource (the Rollout) is not defaulted.
#[test]
fn zeros_the_defaulting_replaces() {
    let defaulted = |group: &str, kind: &str, path: &str, value: Value| {
        let segments = segments(path);
        let (last, parent) = segments.split_last().unwrap();
        let crate::PathSegment::Key(key) = last else {
            panic!("a key")
        };
        OmittedZeros::of_kind(group, kind)
            .defaulted_root()
            .and_then(|root| {
                parent
                    .iter()
                    .try_fold(root, |place, segment| match segment {
                        crate::PathSegment::Key(k) => place.key(k),
                        crate::PathSegment::Index(_) => place.items(),
                    })
            })
            .is_some_and(|place| place.defaulted_zero(key, &value))
    };
    let container = "spec.template.spec.containers[0]";
    for (kind, path, value, want) in [
        (
            "Deployment",
            format!("{container}.imagePullPolicy"),
            json!(""),
            true,
        ),
        (
            "StatefulSet",
            format!("{container}.terminationMessagePath"),
            json!(""),
            true,
        ),
        (
            "DaemonSet",
            format!("{container}.ports[0].protocol"),
            json!(""),
            true,
        ),
        (
            "Deployment",
            format!("{container}.readinessProbe.timeoutSeconds"),
            json!(0),
            true,
        ),
        (
            "Deployment",
            format!("{container}.livenessProbe.httpGet.path"),
            json!(""),
            true,
        ),
        (
            "Deployment",
            "spec.template.spec.dnsPolicy".into(),
            json!(""),
            true,
        ),
        ("Deployment", "spec.strategy.type".into(), json!(""), true),
        (
            "StatefulSet",
            "spec.podManagementPolicy".into(),
            json!(""),
            true,
        ),
        // Not the zero, or not defaulted, or not a kind the API server defaults.
        (
            "Deployment",
            format!("{container}.imagePullPolicy"),
            json!("Always"),
            false,
        ),
        (
            "Deployment",
            format!("{container}.readinessProbe.timeoutSeconds"),
            json!(5),
            false,
        ),
        (
            "Deployment",
            format!("{container}.readinessProbe.initialDelaySeconds"),
            json!(0),
            false,
        ),
        (
            "Deployment",
            format!("{container}.tty"),
            json!(false),
            false,
        ),
        ("Deployment", "spec.paused".into(), json!(false), false),
    ] {
        assert_eq!(
            defaulted("apps", kind, &path, value.clone()),
            want,
            "{kind} {path}: {value}"
        );
    }
    assert!(!defaulted(
        "argoproj.io",
        "Rollout",
        &format!("{container}.imagePullPolicy"),
        json!("")
    ));
}
