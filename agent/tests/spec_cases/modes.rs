//! §3 steps 5 and 9: effective mode, namespace annotation, responses by mode.

use crate::fixtures::*;

#[test]
fn effective_mode_namespace_annotation_and_responses() {
    let env = Env::rules(
        &[
            (
                "ops",
                "enforce",
                format!("mode: enforce\nnamespaces: ['m-*']\n{DEPLOY}\nexemptUsers: [robot]\n"),
            ),
            (
                "ops",
                "warn",
                format!("mode: warn\nnamespaces: ['w-*']\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "dry",
                format!("mode: dry-run\nnamespaces: ['d-*']\n{DEPLOY}\n"),
            ),
            (
                "ops",
                "off",
                format!("mode: off\nnamespaces: ['o-*']\n{DEPLOY}\n"),
            ),
        ],
        &[
            ("m-plain", None),
            ("m-warn", Some("warn")),
            ("m-dry", Some("dry-run")),
            ("m-off", Some("off")),
            ("m-enforce", Some("enforce")),
            ("m-typo", Some("Warn")),
            ("m-bad", Some("block")),
            ("w-plain", None),
            ("w-enforce", Some("enforce")),
            ("w-audit", Some("audit")),
            ("d-plain", None),
            ("d-warn", Some("warn")),
            ("d-typo", Some("Dry-Run")),
            ("m-space", Some("warn ")),
            ("o-plain", None),
            ("o-enforce", Some("enforce")),
            ("o-dry", Some("dry-run")),
            ("o-warn", Some("warn")),
            ("o-typo", Some("Off")),
        ],
    );
    let up = |ns: &str| {
        let d = deployment(ns);
        update(&d, &replicas(&d, 3))
    };
    let same = |ns: &str| {
        let d = deployment(ns);
        update(&d, &d)
    };
    let bypassed = |ns: &str| {
        let d = deployment(ns);
        update(
            &d,
            &replicas(
                &with_annotations(&d, json!({"drift-sentinel.k8s.io/bypass": "true"})),
                3,
            ),
        )
    };
    let deleting = |ns: &str| {
        let d = edit(&deployment(ns), |o| {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
        });
        update(&d, &replicas(&d, 3))
    };
    let r = "spec.replicas";
    env.run(vec![
        case(
            "off rule, invalid namespace mode",
            up("o-typo"),
            allow("ops/off", "off").ns_warning("Off"),
        ),
        case(
            "deletion, invalid namespace mode",
            deleting("m-typo"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case(
            "bypass, invalid namespace mode",
            bypassed("m-typo"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case("enforce rule", up("m-plain"), deny("ops/enforce", r)),
        case(
            "namespace warn over enforce",
            up("m-warn"),
            warned("ops/enforce", r),
        ),
        case(
            "namespace dry-run over enforce",
            up("m-dry"),
            would_deny("ops/enforce", r),
        ),
        case(
            "namespace off over enforce",
            up("m-off"),
            allow("ops/enforce", "off"),
        ),
        case("namespace enforce", up("m-enforce"), deny("ops/enforce", r)),
        case(
            "invalid namespace mode Warn",
            up("m-typo"),
            deny("ops/enforce", r).ns_warning("Warn"),
        ),
        case(
            "invalid namespace mode, no change",
            same("m-typo"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case(
            "invalid namespace mode, exempt user",
            as_user(up("m-typo"), "robot"),
            allow("ops/enforce", "enforce").ns_warning("Warn"),
        ),
        case(
            "invalid namespace mode block",
            up("m-bad"),
            deny("ops/enforce", r).ns_warning("block"),
        ),
        case(
            "exempt user in dry-run namespace",
            as_user(up("m-dry"), "robot"),
            allow("ops/enforce", "dry-run"),
        ),
        case(
            "bypass in warn namespace",
            bypassed("m-warn"),
            allow("ops/enforce", "warn"),
        ),
        case(
            "deletion in off namespace",
            deleting("m-off"),
            allow("ops/enforce", "off"),
        ),
        case("warn rule", up("w-plain"), warned("ops/warn", r)),
        case(
            "namespace enforce over warn",
            up("w-enforce"),
            deny("ops/warn", r),
        ),
        case(
            "warn rule, invalid namespace mode: two warnings",
            up("w-audit"),
            warned("ops/warn", r).ns_warning("audit"),
        ),
        case("dry-run rule", up("d-plain"), would_deny("ops/dry", r)),
        case(
            "namespace warn over dry-run",
            up("d-warn"),
            warned("ops/dry", r),
        ),
        case(
            "dry-run rule, invalid namespace mode",
            up("d-typo"),
            would_deny("ops/dry", r).ns_warning("Dry-Run"),
        ),
        case(
            "namespace mode must match exactly",
            up("m-space"),
            deny("ops/enforce", r).ns_warning("warn "),
        ),
        case("off rule", up("o-plain"), allow("ops/off", "off")),
        case(
            "namespace enforce over off",
            up("o-enforce"),
            deny("ops/off", r),
        ),
        case(
            "namespace dry-run over off",
            up("o-dry"),
            would_deny("ops/off", r),
        ),
        case(
            "namespace warn over off",
            up("o-warn"),
            warned("ops/off", r),
        ),
    ]);

    // Warn: the reason as ONE warning of at most 512 bytes including the `…` it is cut with.
    let d = deployment("w-plain");
    let many: serde_json::Map<String, Value> = (0..40)
        .map(|i| {
            (
                format!("example.com/a-rather-long-label-key-number-{i:02}"),
                json!("v"),
            )
        })
        .collect();
    let review = update(&d, &with_labels(&d, Value::Object(many.clone())));
    let mut paths: Vec<String> = many
        .keys()
        .map(|k| format!("metadata.labels['{k}']"))
        .chain(["metadata.labels.app".to_owned()])
        .collect();
    paths.sort();
    let (_, got) = env.send(&review);
    let response = response_of(&got);
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["auditAnnotations"]["result"], "warned");
    // reference §5: `denied-paths` holds at most 20 paths, then `, … (N more)`.
    assert_eq!(
        response["auditAnnotations"]["denied-paths"],
        json!(format!("{}, … (21 more)", paths[..20].join(", ")))
    );
    let warnings = response["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = warnings[0].as_str().unwrap();
    assert!(warning.len() <= 512, "{} bytes: {warning}", warning.len());
    assert!(warning.ends_with('…'), "{warning}");
    assert!(warning.starts_with(PREFIX), "{warning}");
    assert!(
        format!("{PREFIX}{}", paths.join(", ")).starts_with(warning.trim_end_matches('…')),
        "{warning}"
    );

    // The 512-byte limit counts bytes, with multi-byte characters wherever the cut falls.
    // The warning is the reason (the same rule and change in enforce mode gives it as the
    // message), cut to at most 512 bytes with `…` only when longer.
    let mut seen_short = false;
    let mut seen_long = false;
    for n in 1..=12 {
        for pad in 0..3 {
            let labels: serde_json::Map<String, Value> = (0..n)
                .map(|i| {
                    (
                        format!("example.com/{}k{i:02}", "é".repeat(pad)),
                        json!("ü".repeat(5 * pad)),
                    )
                })
                .collect();
            let change = |ns: &str| {
                let d = deployment(ns);
                update(&d, &with_labels(&d, Value::Object(labels.clone())))
            };
            let (_, enforced) = env.send(&change("m-plain"));
            let (_, warned) = env.send(&change("m-warn"));
            let reason = response_of(&enforced)["status"]["message"]
                .as_str()
                .unwrap()
                .to_owned();
            let warnings = response_of(&warned)["warnings"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert_eq!(warnings.len(), 1, "{warned}");
            let warning = warnings[0].as_str().unwrap();
            if reason.len() <= 512 {
                seen_short = true;
                assert_eq!(
                    warning,
                    reason,
                    "a reason of {} bytes is not cut",
                    reason.len()
                );
            } else {
                seen_long = true;
                assert!(warning.len() <= 512, "{} bytes: {warning}", warning.len());
                let body = warning
                    .strip_suffix('…')
                    .unwrap_or_else(|| panic!("cut without …: {warning}"));
                assert!(
                    reason.starts_with(body),
                    "{warning:?} is not a prefix of {reason:?}"
                );
            }
        }
    }
    assert!(seen_short && seen_long);

    for shift in 0..8 {
        let labels: serde_json::Map<String, Value> = (0..3)
            .map(|i| {
                (
                    format!("k{i}"),
                    json!(format!("{}{}", "x".repeat(shift), "é日本語".repeat(20))),
                )
            })
            .collect();
        let review = update(&d, &with_annotations(&d, Value::Object(labels)));
        let (_, got) = env.send(&review);
        let warnings = response_of(&got)["warnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(warnings.len(), 1, "{got}");
        let warning = warnings[0].as_str().unwrap();
        assert!(warning.len() <= 512, "{} bytes: {warning}", warning.len());
        assert!(
            warning.starts_with(&format!("{PREFIX}metadata.annotations")),
            "{warning}"
        );
    }
}
