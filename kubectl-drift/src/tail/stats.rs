//! The picture of the records shown: violations per minute over the last hour by source (the
//! header's sparklines), and the rules, users, namespaces and denied fields ranked by how many
//! records name them (the top view).

use std::collections::HashMap;
use std::time::SystemTime;

use super::record::{Record, Source};

/// The minutes a sparkline shows, the current one last.
pub(crate) const MINUTES: usize = 60;

/// Records per minute over the last [`MINUTES`] minutes, oldest first, by source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PerMinute {
    pub webhook: [u64; MINUTES],
    pub audit: [u64; MINUTES],
}

impl PerMinute {
    /// Counts `records` by the wall-clock minute of their time; a record from the future (a
    /// clock ahead of this one) counts in the current minute, one older than the hour or
    /// without a time not at all.
    pub(crate) fn of<'r>(records: impl Iterator<Item = &'r Record>, now: SystemTime) -> Self {
        let minute = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() / 60)
        };
        let current = minute(now);
        let mut counts = PerMinute {
            webhook: [0; MINUTES],
            audit: [0; MINUTES],
        };
        for record in records {
            let Some(time) = record.time() else { continue };
            let age = current.saturating_sub(minute(time));
            let Some(slot) = (MINUTES as u64 - 1).checked_sub(age) else {
                continue;
            };
            let row = match record.source() {
                Some(Source::Audit) => &mut counts.audit,
                _ => &mut counts.webhook,
            };
            row[slot as usize] += 1;
        }
        counts
    }
}

/// One ranked name and how many records name it.
pub(crate) type Ranked = Vec<(String, usize)>;

/// The top names of the records shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Top {
    /// Records counted.
    pub records: usize,
    pub rules: Ranked,
    pub users: Ranked,
    pub namespaces: Ranked,
    /// Denied paths, list indices written `[*]` (so `containers[0].image` and
    /// `containers[1].image` are one field).
    pub fields: Ranked,
}

impl Top {
    /// Ranks the names of `records`, most named first (ties by name), `limit` of each.
    pub(crate) fn of<'r>(records: impl Iterator<Item = &'r Record>, limit: usize) -> Self {
        let mut counts: [HashMap<String, usize>; 4] = Default::default();
        let mut total = 0;
        for record in records {
            total += 1;
            *counts[0].entry(record.rule()).or_default() += 1;
            *counts[1].entry(record.user_name().to_owned()).or_default() += 1;
            let namespace = match record.resource_namespace.as_ref() {
                "" => "(cluster)".to_owned(),
                ns => ns.to_owned(),
            };
            *counts[2].entry(namespace).or_default() += 1;
            let mut fields: Vec<String> = record
                .details
                .denied_paths
                .iter()
                .map(|p| any_index(p))
                .collect();
            // A field counts once per record, however many of its items changed.
            fields.sort();
            fields.dedup();
            for field in fields {
                *counts[3].entry(field).or_default() += 1;
            }
        }
        let [rules, users, namespaces, fields] = counts.map(|c| rank(c, limit));
        Top {
            records: total,
            rules,
            users,
            namespaces,
            fields,
        }
    }
}

fn rank(counts: HashMap<String, usize>, limit: usize) -> Ranked {
    let mut ranked: Ranked = counts.into_iter().filter(|(n, _)| !n.is_empty()).collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(limit);
    ranked
}

/// `spec.containers[0].image` as `spec.containers[*].image`.
fn any_index(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        // A quoted key (`annotations['a[1]']`) is copied as it is.
        if rest.starts_with('\'')
            && let Some(close) = rest.find("']")
        {
            out.push_str(&rest[..close + 2]);
            rest = &rest[close + 2..];
            continue;
        }
        match rest.find(']') {
            Some(close) if close > 0 && rest[..close].bytes().all(|b| b.is_ascii_digit()) => {
                out.push('*');
                rest = &rest[close..];
            }
            _ => {}
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(time: &str, source: Source, user: &str, namespace: &str, denied: &[&str]) -> Record {
        Record {
            event_type: match source {
                Source::Webhook => drift_api::violation::ADMISSION_EVENT,
                Source::Audit => drift_api::violation::AUDIT_EVENT,
            }
            .into(),
            id: time.to_owned().into(),
            timestamp: time.to_owned().into(),
            resource_namespace: namespace.to_owned().into(),
            rule_name: "strict".into(),
            rule_namespace: "ops".into(),
            request: Some(drift_api::violation::RequestFields {
                user_name: user.to_owned().into(),
                ..Default::default()
            }),
            details: drift_api::violation::Details {
                denied_paths: denied.iter().map(|p| (*p).to_owned().into()).collect(),
                ..Default::default()
            },
            ..Record::default()
        }
    }

    #[test]
    fn per_minute_of_the_last_hour_by_source() {
        let now = humantime::parse_rfc3339("2027-01-15T08:00:30Z").unwrap();
        let records = [
            record("2027-01-15T08:00:10Z", Source::Webhook, "a", "x", &[]),
            record("2027-01-15T08:00:59Z", Source::Webhook, "a", "x", &[]),
            record("2027-01-15T07:59:59Z", Source::Webhook, "a", "x", &[]),
            record("2027-01-15T07:01:00Z", Source::Audit, "a", "x", &[]),
            // Older than the hour, and from the future.
            record("2027-01-15T07:00:59Z", Source::Audit, "a", "x", &[]),
            record("2027-01-15T09:00:00Z", Source::Audit, "a", "x", &[]),
            record("not a time", Source::Webhook, "a", "x", &[]),
        ];
        let counts = PerMinute::of(records.iter(), now);
        assert_eq!(counts.webhook[59], 2);
        assert_eq!(counts.webhook[58], 1);
        assert_eq!(counts.webhook.iter().sum::<u64>(), 3);
        assert_eq!(counts.audit[0], 1);
        assert_eq!(counts.audit[59], 1);
        assert_eq!(counts.audit.iter().sum::<u64>(), 2);
    }

    #[test]
    fn top_ranks_by_count_then_name() {
        let t = "2027-01-15T08:00:00Z";
        let records = [
            record(t, Source::Webhook, "bob", "prod", &["spec.replicas"]),
            record(
                t,
                Source::Webhook,
                "alice",
                "prod",
                &["spec.c[0].image", "spec.c[1].image"],
            ),
            record(
                t,
                Source::Audit,
                "alice",
                "",
                &["spec.c[2].image", "spec.replicas"],
            ),
        ];
        let top = Top::of(records.iter(), 2);
        assert_eq!(top.records, 3);
        assert_eq!(top.rules, [("ops/strict".to_owned(), 3)]);
        assert_eq!(top.users, [("alice".to_owned(), 2), ("bob".to_owned(), 1)]);
        assert_eq!(
            top.namespaces,
            [("prod".to_owned(), 2), ("(cluster)".to_owned(), 1)]
        );
        assert_eq!(
            top.fields,
            [
                ("spec.c[*].image".to_owned(), 2),
                ("spec.replicas".to_owned(), 2)
            ]
        );
    }

    #[test]
    fn indices_become_any_index() {
        assert_eq!(any_index("a.b[0].c[12]"), "a.b[*].c[*]");
        assert_eq!(
            any_index("metadata.annotations['x[1]']"),
            "metadata.annotations['x[1]']"
        );
        assert_eq!(any_index("a[]"), "a[]");
        assert_eq!(any_index("a[name=x]"), "a[name=x]");
    }
}
