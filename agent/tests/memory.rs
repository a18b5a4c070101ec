//! Black-box tests of reference §5, "Memory": each input of the webhook's serving side that an
//! attacker on the pod network (or anyone who may edit a workload) controls, entering where it
//! enters, with the agent's peak memory (VmHWM) measured before and after, the answers given
//! within the webhook's timeout, the agent alive and the next legitimate review still judged.

mod support;

use std::time::{Duration, Instant};

use drift_testkit::peak_rss;
use serde_json::Value;
use support::{Agent, plain_client, post_text, replicas_review};

const MIB: u64 = 1024 * 1024;
/// The API server's longest webhook timeout is 30 s; the chart's is 10 s.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// The agent answers an ordinary review (denied: replicas changed) and its probes.
fn assert_still_judging(agent: &Agent) {
    let (status, body) = post_text(
        &plain_client(),
        &format!("{}/validate", agent.base),
        replicas_review("after").to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("a review");
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let health = plain_client()
        .get(format!("{}/healthz", agent.base))
        .send()
        .expect("healthz");
    assert!(health.status().is_success());
}

/// POSTs `body` to `/validate`, timed: (status, answer, took).
fn validate(agent: &Agent, body: String) -> (u16, String, Duration) {
    let started = Instant::now();
    let (status, answer) = post_text(&plain_client(), &format!("{}/validate", agent.base), body);
    (status, answer, started.elapsed())
}

/// A user, name, namespace or resource of 2 MiB is logged cut to 16 KiB with a marker of its
/// length; a uid of 2 MiB is refused (400, a short answer, nothing echoed) rather than echoed
/// in a 2 MiB answer.
#[test]
fn long_request_fields_are_cut_in_the_log_and_a_long_uid_is_refused() {
    let agent = Agent::start(&[], false);
    let long = "x".repeat(2 << 20);
    let pointers = [
        "/request/userInfo/username",
        "/request/name",
        "/request/namespace",
        "/request/resource/resource",
    ];
    for pointer in pointers {
        let mut review = replicas_review("shop");
        *review.pointer_mut(pointer).unwrap() = Value::String(long.clone());
        let body = review.to_string();
        let (before, length) = (peak_rss(agent.pid()), body.len() as u64);
        let (status, answer, took) = validate(&agent, body);
        assert_eq!(
            status,
            200,
            "{pointer}: {}",
            &answer[..answer.len().min(300)]
        );
        assert!(took < WEBHOOK_TIMEOUT, "{pointer}: {took:?}");
        assert!(answer.len() <= 64 * 1024, "{pointer}: {}", answer.len());
        // One request raises the peak by at most 4x its body plus 1 MiB (reference §5).
        let rise = peak_rss(agent.pid()).saturating_sub(before);
        assert!(
            rise <= 4 * length + MIB,
            "{pointer}: peak rose {} KiB",
            rise / 1024
        );
    }
    let decisions: Vec<String> = agent
        .logs()
        .into_iter()
        .filter(|l| l.contains("\"admission decision\""))
        .collect();
    assert_eq!(decisions.len(), pointers.len(), "{decisions:?}");
    for line in &decisions {
        assert!(line.len() < 64 * 1024, "a log line of {} bytes", line.len());
        assert!(
            line.contains("…(cut from 20971"),
            "{}",
            &line[..line.len().min(500)]
        );
    }

    let mut review = replicas_review("shop");
    review["request"]["uid"] = Value::String(long.clone());
    let before = peak_rss(agent.pid());
    let (status, answer, took) = validate(&agent, review.to_string());
    assert_eq!(status, 400, "{}", &answer[..answer.len().min(300)]);
    assert!(took < WEBHOOK_TIMEOUT);
    assert!(
        answer.contains("request.uid is 2097152 bytes long; at most 128 are answered"),
        "{answer}"
    );
    assert!(answer.len() < 1024, "{}", answer.len());

    let rise = peak_rss(agent.pid()).saturating_sub(before);
    assert!(rise <= 4 * 2 * MIB + MIB, "peak rose {} KiB", rise / 1024);
    assert_still_judging(&agent);
}
