//! `--server-dry-run`: the update sent to the API server with `dryRun=All` (nothing is stored),
//! so that the installed webhook answers; its answer shown next to the local verdict. The two
//! disagreeing (one denies, the other allows) is an error: the installed webhook runs another
//! rule set, or is not installed.

use std::fmt::Write as _;

use anyhow::{Context as _, bail};
use kube::client::Body;
use kube::core::params::PostParams;
use kube::core::request::Request;
use serde_json::{Value, json};

use super::resolve::Resource;
use crate::cluster::{Cluster, FIELD_MANAGER, warnings};
use crate::plan::Print;
use crate::render::{self, PreviewParts};
use crate::verdict::{Verdict, WEBHOOK_NAME};

/// What the API server answered to the dry-run update.
#[derive(Debug, Clone)]
pub(crate) struct ServerAnswer {
    pub allowed: bool,
    /// The HTTP status.
    pub code: u16,
    /// `reason` of the Status of a denial.
    pub reason: String,
    /// The message of a denial: `admission webhook "…" denied the request: …`.
    pub message: Option<String>,
    /// The warnings of an allowed update (`Warning` headers): a warn-mode violation.
    pub warnings: Vec<String>,
}

/// The admission webhook a denial names (`admission webhook "NAME" denied the request: …`).
fn denying_webhook(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("admission webhook \"")?;
    let (name, rest) = rest.split_once('"')?;
    rest.trim_start()
        .starts_with("denied the request")
        .then_some(name)
}

/// What a dry run came back with.
pub(crate) enum Sent {
    /// The admission chain's answer (allowed, or denied by Drift Sentinel's webhook).
    Answered(ServerAnswer),
    /// `409 Conflict`: the object changed since it was read; the message.
    Conflict(String),
}

/// Sends `object` as a dry-run update (`PUT …?dryRun=All`) of `name`.
pub(crate) async fn send(
    cluster: &Cluster,
    resource: &Resource,
    namespace: &str,
    name: &str,
    object: &Value,
) -> anyhow::Result<Sent> {
    let what = format!("{} {name:?}", resource.qualified());
    let params = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let request = Request::new(resource.collection(namespace))
        .replace(name, &params, serde_json::to_vec(object)?)
        .context("cannot build the dry-run request")?;
    let response = cluster
        .timed(cluster.client.send(request.map(Body::from)))
        .await
        .with_context(|| format!("the server-side dry-run of {what} failed"))?;
    let code = response.status().as_u16();
    let warnings = warnings(response.headers());
    let body = cluster
        .timed(response.into_body().collect_bytes())
        .await
        .with_context(|| format!("the server-side dry-run of {what} failed"))?;
    if (200..300).contains(&code) {
        return Ok(Sent::Answered(ServerAnswer {
            allowed: true,
            code,
            reason: String::new(),
            message: None,
            warnings,
        }));
    }
    let status: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = |key: &str| {
        status
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let message = match text("message") {
        m if m.is_empty() => String::from_utf8_lossy(&body).trim().to_owned(),
        m => m,
    };
    let reason = text("reason");
    if code == 409 {
        return Ok(Sent::Conflict(message));
    }
    match denying_webhook(&message) {
        Some(WEBHOOK_NAME) => Ok(Sent::Answered(ServerAnswer {
            allowed: false,
            code,
            reason,
            message: Some(message),
            warnings,
        })),
        Some(other) => bail!(
            "the server-side dry-run of {what} was denied by another admission webhook, {other:?}, not Drift Sentinel's: {message}"
        ),
        None => bail!(
            "the server-side dry-run of {what} failed: {message} ({code}{})",
            if reason.is_empty() {
                String::new()
            } else {
                format!(" {reason}")
            }
        ),
    }
}

fn headline(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Denied => "DENIED",
        Verdict::ViolationAllowed => "ALLOWED WITH A VIOLATION",
        Verdict::Allowed => "ALLOWED",
    }
}

/// Prints the local verdict (and what `preview` prints of it) with the API server's answer
/// beside it; their disagreement is an error.
pub(crate) fn report(
    print: Print,
    verdict: Verdict,
    parts: PreviewParts,
    answer: &ServerAnswer,
) -> anyhow::Result<Verdict> {
    let PreviewParts {
        mut document,
        mut screen,
    } = parts;
    let local_allowed = verdict != Verdict::Denied;
    let agree = local_allowed == answer.allowed;
    // Both deny, in other words: the installed webhook may run other rules than those read.
    let local_message = document["apiServerMessage"].as_str().map(str::to_owned);
    let messages_differ = agree && !answer.allowed && answer.message != local_message;
    document["serverDryRun"] = json!({
        "allowed": answer.allowed,
        "code": answer.code,
        "reason": answer.reason,
        "message": answer.message,
        "warnings": answer.warnings,
        "agrees": agree,
        "messagesDiffer": messages_differ,
    });
    if !agree {
        document["exitCode"] = json!(2);
    }
    let server = if answer.allowed {
        "ALLOWED".to_owned()
    } else {
        format!("DENIED ({} {})", answer.code, answer.reason)
    };
    let _ = writeln!(
        screen,
        "\nServer-side dry run (the update sent with dryRun=All; the installed webhook answers):"
    );
    let _ = writeln!(screen, "  kubectl drift:  {}", headline(verdict));
    let _ = writeln!(screen, "  API server:     {server}");
    if let Some(message) = &answer.message {
        // As kubectl prints it: the Status reason in brackets when there is one.
        match answer.reason.as_str() {
            "" => {
                let _ = writeln!(screen, "    Error from server: {message}");
            }
            reason => {
                let _ = writeln!(screen, "    Error from server ({reason}): {message}");
            }
        }
    }
    for warning in &answer.warnings {
        let _ = writeln!(screen, "    Warning: {warning}");
    }
    if messages_differ {
        let _ = writeln!(
            screen,
            "  They agree on the verdict, but not on the message: the installed webhook may run other rules than the cluster's rule ConfigMaps say (an agent not yet synced, or another version)."
        );
    } else if agree {
        let _ = writeln!(screen, "  They agree.");
    } else {
        let _ = writeln!(screen, "  They DISAGREE.");
    }
    render::emit(print, &document, |_| screen)?;
    if !agree {
        let (local, remote) = if local_allowed {
            ("allows", "denies")
        } else {
            ("denies", "allows")
        };
        bail!(
            "the verdicts disagree: kubectl drift {local} the update, the API server's dry run {remote} it; the installed webhook runs a different rule set (or another version), or is not installed"
        );
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_denials() {
        assert_eq!(
            denying_webhook(
                "admission webhook \"validate.drift-sentinel.k8s.io\" denied the request: no"
            ),
            Some("validate.drift-sentinel.k8s.io")
        );
        assert_eq!(
            denying_webhook("deployments.apps \"web\" is forbidden: User \"x\" cannot update"),
            None
        );
    }
}
