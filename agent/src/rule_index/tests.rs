//! The index fed with watch events and fetch results, as the event loop would: what it says
//! to fetch, forget and serve.

use std::collections::BTreeMap;

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn meta(namespace: &str, name: &str, uid: &str, version: &str, rule: bool) -> ConfigMapMeta {
    let mut annotations = std::collections::BTreeMap::new();
    if rule {
        annotations.insert(
            drift_engine::rule::RULE_ANNOTATION.to_owned(),
            " TRUE ".to_owned(),
        );
    }
    annotations.insert("other".to_owned(), "x".repeat(100));
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            resource_version: Some(version.into()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        _phantom: std::marker::PhantomData,
    }
}

fn id(namespace: &str, name: &str) -> RuleId {
    RuleId {
        namespace: namespace.into(),
        name: name.into(),
    }
}

const SPEC: &str = "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\n";

fn read(uid: &str, version: &str, spec: &str) -> Result<FetchedRule, String> {
    Ok(FetchedRule {
        uid: uid.into(),
        resource_version: version.into(),
        spec: Some(spec.into()),
    })
}

/// Lists `objects` as a (re)list does.
fn list(index: &mut RuleIndex, objects: &[ConfigMapMeta]) -> Changes {
    assert_eq!(index.apply(&Event::Init), Changes::default());
    for object in objects {
        assert_eq!(
            index.apply(&Event::InitApply(object.clone())),
            Changes::default()
        );
    }
    index.apply(&Event::InitDone)
}

fn fetch(index: &mut RuleIndex, rule: &RuleId, result: Result<FetchedRule, String>) -> Changes {
    let request = index.start_fetch(rule).expect("a fetch is due");
    index.fetched(&request, result)
}

#[test]
fn a_list_asks_to_fetch_the_rules_only_and_fetches_make_them_sources() {
    let mut index = RuleIndex::new();
    let changes = list(
        &mut index,
        &[
            meta("ops", "rule", "u1", "1", true),
            meta("apps", "plain", "u2", "2", false),
        ],
    );
    assert_eq!(changes.fetch, vec![id("ops", "rule")]);
    assert!(changes.changed);
    // Only the rule is kept, and stripped of what is never read.
    assert_eq!(index.store().state().len(), 1);
    assert_eq!(index.pending(), 1);
    assert!(index.sources().rules.is_empty());

    let changes = fetch(&mut index, &id("ops", "rule"), read("u1", "1", SPEC));
    assert!(changes.changed);
    assert!(changes.fetch.is_empty());
    assert_eq!(index.pending(), 0);
    let Sources {
        rules: sources,
        unreadable,
        ..
    } = index.sources();
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0].spec.yaml(), Some(SPEC));
    assert!(unreadable.is_empty());
    // While a fetch runs, no second one is started.
    assert!(index.start_fetch(&id("ops", "rule")).is_none());
}

#[test]
fn versions_deletions_and_the_annotation_removed() {
    let mut index = RuleIndex::new();
    list(&mut index, &[meta("ops", "rule", "u1", "1", true)]);
    fetch(&mut index, &id("ops", "rule"), read("u1", "1", SPEC));

    // The same version again (a resumed watch, an unrelated relist): nothing to do.
    let again = index.apply(&Event::Apply(meta("ops", "rule", "u1", "1", true)));
    assert_eq!(again, Changes::default());
    // A new version: fetch it; the old one stays in force meanwhile.
    let newer = index.apply(&Event::Apply(meta("ops", "rule", "u1", "2", true)));
    assert_eq!(newer.fetch, vec![id("ops", "rule")]);
    assert!(!newer.changed);
    assert_eq!(index.sources().rules.len(), 1);
    let warn = SPEC.replace("enforce", "warn");
    let done = fetch(&mut index, &id("ops", "rule"), read("u1", "2", &warn));
    assert!(done.changed);
    assert_eq!(index.sources().rules[0].spec.yaml(), Some(warn.as_str()));

    // The annotation removed: forgotten, like a deletion.
    let removed = index.apply(&Event::Apply(meta("ops", "rule", "u1", "3", false)));
    assert_eq!(removed.forgotten, vec![id("ops", "rule")]);
    assert!(removed.changed);
    assert!(index.sources().rules.is_empty());
    assert!(index.store().state().is_empty());

    // Annotated again, then deleted.
    let back = index.apply(&Event::Apply(meta("ops", "rule", "u1", "4", true)));
    assert_eq!(back.fetch, vec![id("ops", "rule")]);
    let deleted = index.apply(&Event::Delete(meta("ops", "rule", "u1", "5", true)));
    assert_eq!(deleted.forgotten, vec![id("ops", "rule")]);
    // It was never read: the rule set did not change.
    assert!(!deleted.changed);
    // A late fetch of a forgotten ConfigMap is ignored.
    let request = FetchRequest {
        id: id("ops", "rule"),
        uid: "u1".into(),
    };
    assert_eq!(
        index.fetched(&request, read("u1", "4", SPEC)),
        Changes::default()
    );
    assert!(index.sources().rules.is_empty());
}

#[test]
fn a_relist_forgets_what_is_gone_and_fetches_only_what_changed() {
    let mut index = RuleIndex::new();
    list(
        &mut index,
        &[
            meta("ops", "a", "ua", "1", true),
            meta("ops", "b", "ub", "1", true),
        ],
    );
    fetch(&mut index, &id("ops", "a"), read("ua", "1", SPEC));
    fetch(&mut index, &id("ops", "b"), read("ub", "1", SPEC));

    // During the relist, nothing changes; at its end: b is gone, a unchanged, c new.
    let changes = list(
        &mut index,
        &[
            meta("ops", "a", "ua", "1", true),
            meta("ops", "c", "uc", "7", true),
        ],
    );
    assert_eq!(changes.forgotten, vec![id("ops", "b")]);
    assert_eq!(changes.fetch, vec![id("ops", "c")]);
    assert!(changes.changed);
    let names: Vec<String> = index
        .sources()
        .rules
        .iter()
        .map(|s| s.id.name.clone())
        .collect();
    assert_eq!(names, ["a"]);

    // A ConfigMap deleted and created again under the same name (the delete missed):
    // the new one replaces the old one, which stops applying.
    let replaced = index.apply(&Event::Apply(meta("ops", "a", "ua2", "9", true)));
    assert!(replaced.changed);
    assert_eq!(replaced.fetch, vec![id("ops", "a")]);
    assert!(index.sources().rules.is_empty());
}

#[test]
fn a_rule_that_cannot_be_read_is_reported_and_fetched_again() {
    let mut index = RuleIndex::new();
    list(&mut index, &[meta("ops", "rule", "u1", "1", true)]);
    let failed = fetch(
        &mut index,
        &id("ops", "rule"),
        Err("cannot read: 500".into()),
    );
    assert!(failed.changed);
    assert_eq!(index.pending(), 0);
    let Sources {
        rules: sources,
        unreadable,
        ..
    } = index.sources();
    assert!(sources.is_empty());
    assert_eq!(
        unreadable,
        vec![(id("ops", "rule"), "cannot read: 500".into())]
    );
    assert_eq!(index.unreadable(), vec![id("ops", "rule")]);
    fetch(&mut index, &id("ops", "rule"), read("u1", "1", SPEC));
    assert!(index.unreadable().is_empty());
    assert_eq!(index.sources().rules.len(), 1);

    // A new version that cannot be read keeps the last one read in force, shown stale.
    index.apply(&Event::Apply(meta("ops", "rule", "u1", "2", true)));
    let failed = fetch(&mut index, &id("ops", "rule"), Err("timed out".into()));
    assert!(failed.changed);
    let sources = index.sources();
    assert_eq!(sources.rules[0].spec.yaml(), Some(SPEC));
    assert!(sources.unreadable.is_empty());
    assert_eq!(sources.stale[0].reason, "timed out");
    assert_eq!(
        (
            sources.stale[0].served_resource_version.as_str(),
            sources.stale[0].resource_version.as_str()
        ),
        ("1", "2")
    );
    assert_eq!(index.unreadable(), vec![id("ops", "rule")]);
    // No InvalidRule Event for it: the version is not known to be invalid.
    assert!(index.unreported_invalid().is_empty());
    let warn = SPEC.replace("enforce", "warn");
    assert!(fetch(&mut index, &id("ops", "rule"), read("u1", "2", &warn)).changed);
    assert!(index.unreadable().is_empty());
    assert!(index.sources().stale.is_empty());
}

#[test]
fn a_version_shown_by_the_watch_during_a_fetch_is_fetched_next() {
    let mut index = RuleIndex::new();
    list(&mut index, &[meta("ops", "rule", "u1", "1", true)]);
    let request = index.start_fetch(&id("ops", "rule")).unwrap();
    index.apply(&Event::Apply(meta("ops", "rule", "u1", "2", true)));
    let changes = index.fetched(&request, read("u1", "1", SPEC));
    assert!(changes.changed);
    assert_eq!(changes.fetch, vec![id("ops", "rule")]);
    // The GET returned a version the watch has not shown yet: when it does, no refetch.
    fetch(&mut index, &id("ops", "rule"), read("u1", "3", SPEC));
    let shown = index.apply(&Event::Apply(meta("ops", "rule", "u1", "3", true)));
    assert_eq!(shown, Changes::default());
}

#[test]
fn each_invalid_version_is_reported_once() {
    let mut index = RuleIndex::new();
    list(&mut index, &[meta("ops", "typo", "u1", "1", true)]);
    fetch(
        &mut index,
        &id("ops", "typo"),
        read("u1", "1", "mode: nope\n"),
    );
    let first = index.unreported_invalid();
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].uid.as_str(), first[0].resource_version.as_str()),
        ("u1", "1")
    );
    assert!(
        first[0].error.to_string().contains("mode"),
        "{:?}",
        first[0]
    );
    assert!(index.unreported_invalid().is_empty());
    // A relist of the same version: not again.
    list(&mut index, &[meta("ops", "typo", "u1", "1", true)]);
    assert!(index.unreported_invalid().is_empty());
    // A new version, still invalid: once more.
    index.apply(&Event::Apply(meta("ops", "typo", "u1", "2", true)));
    fetch(
        &mut index,
        &id("ops", "typo"),
        read("u1", "2", "mode: nah\n"),
    );
    assert_eq!(index.unreported_invalid().len(), 1);
    // One that cannot be read at all: reported too, once.
    index.apply(&Event::Apply(meta("ops", "gone", "u2", "5", true)));
    fetch(
        &mut index,
        &id("ops", "gone"),
        Err("cannot read: 500".into()),
    );
    let unreadable = index.unreported_invalid();
    assert_eq!(unreadable.len(), 1);
    assert_eq!(unreadable[0].error.reason, "cannot read: 500");
    assert!(index.unreported_invalid().is_empty());
}

const TYPO: &str =
    "mode: enforce\nnamespaces: ['*']\nselectors: [{kind: Deployment}]\nmutabel: [x]\n";

#[test]
fn an_invalid_version_keeps_the_last_good_one_stale_and_reported() {
    let mut index = RuleIndex::new();
    list(&mut index, &[meta("ops", "rule", "u1", "1", true)]);
    fetch(&mut index, &id("ops", "rule"), read("u1", "1", SPEC));
    let good = index.last_good();
    assert_eq!(good[&id("ops", "rule")].resource_version, "1");
    assert!(index.sources().stale.is_empty());

    index.apply(&Event::Apply(meta("ops", "rule", "u1", "2", true)));
    assert!(fetch(&mut index, &id("ops", "rule"), read("u1", "2", TYPO)).changed);
    let sources = index.sources();
    assert_eq!(sources.rules.len(), 1);
    assert_eq!(sources.rules[0].spec.yaml(), Some(SPEC));
    assert_eq!(sources.stale.len(), 1);
    let stale = &sources.stale[0];
    assert_eq!(stale.rule, "ops/rule");
    assert_eq!(
        (
            stale.served_resource_version.as_str(),
            stale.resource_version.as_str()
        ),
        ("1", "2")
    );
    assert!(stale.reason.contains("mutabel"), "{stale:?}");
    assert!(stale.since.is_some());
    // The InvalidRule Event of version 2 is still due.
    let invalid = index.unreported_invalid();
    assert_eq!(invalid.len(), 1);
    assert_eq!(invalid[0].resource_version, "2");
    // Still the last good version in the store.
    assert_eq!(index.last_good(), good);

    // Fixed: served as written, no longer stale, the new last good version.
    index.apply(&Event::Apply(meta("ops", "rule", "u1", "3", true)));
    let warn = SPEC.replace("enforce", "warn");
    fetch(&mut index, &id("ops", "rule"), read("u1", "3", &warn));
    assert!(index.sources().stale.is_empty());
    assert_eq!(index.last_good()[&id("ops", "rule")].resource_version, "3");

    // Deleted: the rule goes, and so does its last good version.
    index.apply(&Event::Delete(meta("ops", "rule", "u1", "4", true)));
    assert!(index.sources().rules.is_empty());
    assert!(index.last_good().is_empty());
}

#[test]
fn a_rule_never_valid_is_not_served() {
    let mut index = RuleIndex::new();
    list(&mut index, &[meta("ops", "typo", "u1", "1", true)]);
    fetch(&mut index, &id("ops", "typo"), read("u1", "1", TYPO));
    let sources = index.sources();
    // Given to the engine as written: it reports it invalid and does not apply it.
    assert_eq!(sources.rules[0].spec.yaml(), Some(TYPO));
    assert!(sources.stale.is_empty());
    assert!(index.last_good().is_empty());
}

#[test]
fn last_good_versions_of_an_earlier_run_count_for_the_same_config_map_only() {
    let mut persisted = LastGoodMap::new();
    for (name, uid) in [("rule", "u1"), ("recreated", "old-uid"), ("deleted", "u9")] {
        persisted.insert(
            id("ops", name),
            LastGood {
                uid: uid.into(),
                resource_version: "1".into(),
                spec: SPEC.into(),
            },
        );
    }
    let mut index = RuleIndex::with_last_good(persisted);
    list(
        &mut index,
        &[
            meta("ops", "rule", "u1", "2", true),
            meta("ops", "recreated", "new-uid", "2", true),
        ],
    );
    fetch(&mut index, &id("ops", "rule"), read("u1", "2", TYPO));
    fetch(
        &mut index,
        &id("ops", "recreated"),
        read("new-uid", "2", TYPO),
    );
    let sources = index.sources();
    let stale: Vec<&str> = sources.stale.iter().map(|s| s.rule.as_str()).collect();
    assert_eq!(stale, ["ops/rule"]);
    let served: BTreeMap<String, Option<String>> = sources
        .rules
        .iter()
        .map(|r| (r.id.name.clone(), r.spec.yaml().map(str::to_owned)))
        .collect();
    assert_eq!(served["rule"].as_deref(), Some(SPEC));
    assert_eq!(served["recreated"].as_deref(), Some(TYPO));
    // What the store should hold: the rule's kept version; the others are gone from it.
    let keys: Vec<String> = index.last_good().keys().map(|k| k.name.clone()).collect();
    assert_eq!(keys, ["rule"]);

    // Unreadable after a restart: the kept version is served, stale.
    let mut persisted = LastGoodMap::new();
    persisted.insert(
        id("ops", "rule"),
        LastGood {
            uid: "u1".into(),
            resource_version: "1".into(),
            spec: SPEC.into(),
        },
    );
    let mut index = RuleIndex::with_last_good(persisted);
    list(&mut index, &[meta("ops", "rule", "u1", "2", true)]);
    fetch(
        &mut index,
        &id("ops", "rule"),
        Err("cannot read: 500".into()),
    );
    let sources = index.sources();
    assert_eq!(sources.rules.len(), 1);
    assert!(sources.unreadable.is_empty());
    assert_eq!(sources.stale[0].reason, "cannot read: 500");
}
