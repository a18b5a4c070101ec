//! §5: the admission protocol.

use crate::fixtures::*;

/// [`drift_testkit::raw_exchange`] to the agent's loopback `port`.
fn raw_exchange(port: u16, head: &str, pieces: &[&[u8]]) -> String {
    drift_testkit::raw_exchange(("127.0.0.1", port), head, pieces)
}

#[test]
fn admission_protocol() {
    let env = Env::rules(
        &[(
            "ops",
            "r",
            format!("mode: enforce\nnamespaces: ['*']\n{DEPLOY}\n"),
        )],
        &[],
    );
    let d = deployment("prod");
    let denied_review = update(&d, &replicas(&d, 3));
    let send = |content_type: &str, body: Vec<u8>| {
        let response = env
            .client
            .post(&env.url)
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .unwrap();
        (response.status().as_u16(), response.text().unwrap())
    };
    let mut problems: Vec<String> = Vec::new();
    fn expect_code(problems: &mut Vec<String>, what: &str, got: u16, want: u16, body: &str) {
        if got != want {
            problems.push(format!("{what}: HTTP {got}, want {want}: {body}"));
        }
    }

    // Content types.
    let body = denied_review.to_string().into_bytes();
    for ct in [
        "text/plain",
        "application/yaml",
        "application/x-www-form-urlencoded",
    ] {
        let (code, text) = send(ct, body.clone());
        expect_code(
            &mut problems,
            &format!("content type {ct}"),
            code,
            415,
            &text,
        );
    }
    let (code, text) = send("application/json; charset=utf-8", body.clone());
    expect_code(
        &mut problems,
        "application/json; charset=utf-8",
        code,
        200,
        &text,
    );
    let (code, text) = send("Application/JSON", body.clone());
    expect_code(
        &mut problems,
        "media types are case-insensitive",
        code,
        200,
        &text,
    );

    // Not an AdmissionReview: 400.
    for (what, bad) in [
        ("not JSON", b"{not json".to_vec()),
        ("a Pod", br#"{"apiVersion":"v1","kind":"Pod"}"#.to_vec()),
        ("a JSON array", b"[]".to_vec()),
        (
            "another kind with a request",
            json!({"apiVersion": "v1", "kind": "Pod", "request": denied_review["request"].clone()})
                .to_string()
                .into_bytes(),
        ),
    ] {
        let response = env
            .client
            .post(&env.url)
            .header("Content-Type", "application/json")
            .body(bad)
            .send()
            .unwrap();
        let plain = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain"));
        let (code, text) = (response.status().as_u16(), response.text().unwrap());
        if !plain {
            problems.push(format!("{what}: the 400 is not a plain-text message"));
        }
        expect_code(&mut problems, what, code, 400, &text);
        if text.trim().is_empty() {
            problems.push(format!("{what}: 400 without a message"));
        }
    }

    // 413 beyond 8 MiB; exactly 8 MiB is read.
    let over = raw_exchange(
        env.agent.port,
        &format!(
            "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            8 * 1024 * 1024 + 1
        ),
        &[&vec![b' '; 8 * 1024 * 1024 + 1]],
    );
    if !over.starts_with("HTTP/1.1 413") {
        problems.push(format!(
            "8 MiB + 1: {}",
            over.lines().next().unwrap_or_default()
        ));
    }
    let chunk = format!("{:x}\r\n{}\r\n", 1024 * 1024, " ".repeat(1024 * 1024));
    let chunks: Vec<&[u8]> = (0..9).map(|_| chunk.as_bytes()).collect();
    let streamed = raw_exchange(
        env.agent.port,
        "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        &chunks,
    );
    if !streamed.starts_with("HTTP/1.1 413") {
        problems.push(format!(
            "9 MiB chunked: {}",
            streamed.lines().next().unwrap_or_default()
        ));
    }
    let mut exact = denied_review.to_string().into_bytes();
    exact.resize(8 * 1024 * 1024, b' ');
    let (code, text) = send("application/json", exact);
    expect_code(
        &mut problems,
        "exactly 8 MiB",
        code,
        200,
        &text[..text.len().min(300)],
    );
    if code == 200 {
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        if v["response"]["uid"] != denied_review["request"]["uid"]
            || v["response"]["allowed"] != false
        {
            problems.push(format!("exactly 8 MiB: {v}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // AdmissionReview-shaped errors and the decisions around them.
    let check_400 = |what: &str, review: &Value| {
        let (code, got) = env.send(review);
        assert_eq!(code, 200, "{what}: {got}");
        assert_eq!(got["kind"], "AdmissionReview", "{what}: {got}");
        let r = response_of(&got);
        assert_eq!(r["allowed"], false, "{what}: {got}");
        assert_eq!(r["status"]["code"], 400, "{what}: {got}");
        assert!(
            r["status"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: a reason: {got}"
        );
        if let Some(uid) = review["request"]["uid"].as_str() {
            assert_eq!(r["uid"], uid, "{what}");
        }
    };
    check_400(
        "no request",
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
    );
    check_400(
        "request null",
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": null}),
    );
    let mut beta_bad = update(&d, &replicas(&d, 3));
    beta_bad["apiVersion"] = json!("admission.k8s.io/v1beta1");
    beta_bad["request"]["object"] = json!([]);
    let (_, got) = env.send(&beta_bad);
    assert_eq!(got["apiVersion"], "admission.k8s.io/v1beta1", "{got}");
    assert_eq!(response_of(&got)["status"]["code"], 400, "{got}");
    assert_eq!(
        response_of(&got)["uid"],
        beta_bad["request"]["uid"],
        "{got}"
    );
    let (_, got) =
        env.send(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}));
    assert_eq!(got["apiVersion"], "admission.k8s.io/v1beta1", "{got}");
    assert_eq!(response_of(&got)["status"]["code"], 400, "{got}");
    for (what, field, value) in [
        ("object null", "object", Value::Null),
        ("object an array", "object", json!([1])),
        ("object a string", "object", json!("x")),
        ("oldObject null", "oldObject", Value::Null),
        ("oldObject a number", "oldObject", json!(3)),
    ] {
        let mut review = update(&d, &replicas(&d, 3));
        review["request"][field] = value;
        check_400(what, &review);
    }
    let mut missing_old = update(&d, &replicas(&d, 3));
    missing_old["request"]
        .as_object_mut()
        .unwrap()
        .remove("oldObject");
    check_400("oldObject missing", &missing_old);

    let op = |operation: &str, object: Value, old: Value| {
        let mut review = update(&d, &replicas(&d, 3));
        review["request"]["operation"] = json!(operation);
        review["request"]["object"] = object;
        review["request"]["oldObject"] = old;
        review
    };
    let beta = |mut review: Value| {
        review["apiVersion"] = json!("admission.k8s.io/v1beta1");
        review
    };
    let dry = |mut review: Value| {
        review["request"]["dryRun"] = json!(true);
        review
    };
    env.run(vec![
        case(
            "UPDATE denied, uid echoed",
            denied_review.clone(),
            deny("ops/r", "spec.replicas"),
        ),
        case(
            "v1beta1 answered as v1beta1 (denied)",
            beta(update(&d, &replicas(&d, 3))),
            deny("ops/r", "spec.replicas"),
        ),
        case(
            "v1beta1 answered as v1beta1 (allowed)",
            beta(update(&d, &d)),
            allow("ops/r", "enforce"),
        ),
        case(
            "dryRun decided like any other",
            dry(update(&d, &replicas(&d, 3))),
            deny("ops/r", "spec.replicas"),
        ),
        case(
            "CREATE of a matching object",
            op("CREATE", replicas(&d, 3), Value::Null),
            no_rule(),
        ),
        case(
            "CREATE whatever its object",
            op("CREATE", json!("x"), json!([1])),
            no_rule(),
        ),
        case(
            "DELETE without object",
            op("DELETE", Value::Null, d.clone()),
            no_rule(),
        ),
        case(
            "DELETE whatever its objects",
            op("DELETE", Value::Null, Value::Null),
            no_rule(),
        ),
        case(
            "CONNECT",
            op("CONNECT", json!({"kind": "PodExecOptions"}), Value::Null),
            no_rule(),
        ),
        case(
            "v1beta1 CREATE",
            beta(op("CREATE", replicas(&d, 3), Value::Null)),
            no_rule(),
        ),
    ]);
}
