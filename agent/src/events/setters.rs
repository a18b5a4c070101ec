//! Who set which bypass annotation on which object, as the webhook saw it (reference §8 "Who
//! and why", step 1): the record of a later edit under the bypass names that user only while
//! the webhook can know the annotation was not rewritten since: the managedFields entry
//! (manager, operation, subresource, time) that owned the annotation in the object the setter's
//! edit produced still owns it in the object the later edit started from. An edit the webhook
//! did not see (it was down, its failure policy let the edit through, another replica judged
//! it) that removed the annotation and set it again moves that entry on, so the earlier setter
//! is never carried over: the record then names no setter, and the audit says why.
//!
//! Bounded: at most [`MAX_BYPASS_SETTERS`]; the one observed longest ago is forgotten first,
//! through an index ordered by that time ([`Setters::by_time`]), in O(log n).

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use drift_engine::managed::EntryStamp;

/// Who set which bypass annotation value on which object, kept at once.
pub const MAX_BYPASS_SETTERS: usize = 4096;

/// The bypass annotation an edit was made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BypassSeen {
    /// Its value on the new object (an honoured value: `true` or a time, so short).
    pub value: String,
    /// Whether this edit set it (the old object had another value or none): its user set the
    /// bypass.
    pub set_here: bool,
    /// The managedFields entry that owns the annotation in the new object.
    pub owner: Option<EntryStamp>,
    /// The one that owns it in the old object, when this edit did not set it.
    pub owner_before: Option<EntryStamp>,
}

/// Which object, and which value of its bypass annotation.
type Key = (String, String);

#[derive(Debug)]
struct Setter {
    user: String,
    /// The entry that owns the annotation as the latest edit seen left it.
    owner: EntryStamp,
    /// When it was last observed: the order of [`Setters::by_time`].
    at: SystemTime,
    /// Tells apart setters observed at the same time.
    id: u64,
}

/// The setters seen, and their order of forgetting.
#[derive(Debug)]
pub struct Setters {
    by_key: HashMap<Key, Setter>,
    /// Exactly the keys of `by_key`, by `(at, id)`: the one observed longest ago first.
    by_time: BTreeMap<(SystemTime, u64), Key>,
    next_id: u64,
    /// [`MAX_BYPASS_SETTERS`] (smaller in tests).
    max: usize,
}

impl Default for Setters {
    fn default() -> Self {
        Self::with_max(MAX_BYPASS_SETTERS)
    }
}

impl Setters {
    pub fn with_max(max: usize) -> Self {
        Self {
            by_key: HashMap::new(),
            by_time: BTreeMap::new(),
            next_id: 0,
            max,
        }
    }

    /// An edit by `user` of the object `uid` under the bypass `seen`, at `at`: who set the
    /// bypass (cut as records cut users), when the webhook can know it. An edit that set it is remembered as the setter;
    /// one that did not names the setter remembered only when the old object's owner of the
    /// annotation is the one the setter's edit (or a later edit seen, which did not rewrite
    /// it) left, and then carries that on to the owner in the new object. Otherwise the
    /// setter remembered is forgotten (the annotation was written since by an edit not seen).
    pub fn observe(
        &mut self,
        uid: &str,
        user: &str,
        seen: &BypassSeen,
        at: SystemTime,
    ) -> Option<String> {
        let key = (uid.to_owned(), seen.value.clone());
        if seen.set_here {
            self.forget(&key);
            // Without an owner nothing later can be checked against it: nothing to keep.
            let owner = seen.owner.clone()?;
            let user = drift_engine::attribution::bounded_user(user);
            self.insert(key, user.clone(), owner, at);
            return Some(user);
        }
        let setter = self.forget(&key)?;
        let unchanged = seen.owner_before.as_ref() == Some(&setter.owner);
        let (true, Some(owner)) = (unchanged, seen.owner.clone()) else {
            return None;
        };
        let user = setter.user;
        self.insert(key, user.clone(), owner, at);
        Some(user)
    }

    fn insert(&mut self, key: Key, user: String, owner: EntryStamp, at: SystemTime) {
        if self.by_key.len() >= self.max
            && let Some((_, oldest)) = self.by_time.pop_first()
        {
            self.by_key.remove(&oldest);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.by_time.insert((at, id), key.clone());
        self.by_key.insert(
            key,
            Setter {
                user,
                owner,
                at,
                id,
            },
        );
    }

    fn forget(&mut self, key: &Key) -> Option<Setter> {
        let setter = self.by_key.remove(key)?;
        self.by_time.remove(&(setter.at, setter.id));
        Some(setter)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    fn entry(manager: &str, time: &str) -> EntryStamp {
        EntryStamp {
            manager: manager.into(),
            operation: "Update".into(),
            subresource: String::new(),
            time: Some(time.into()),
        }
    }

    /// An edit that set the bypass, leaving the annotation owned by `owner`.
    fn set(owner: EntryStamp) -> BypassSeen {
        BypassSeen {
            value: "true".into(),
            set_here: true,
            owner: Some(owner),
            owner_before: None,
        }
    }

    /// An edit under the bypass that did not set it: the annotation owned by `before` in the
    /// old object, `after` in the new.
    fn used(before: EntryStamp, after: EntryStamp) -> BypassSeen {
        BypassSeen {
            value: "true".into(),
            set_here: false,
            owner: Some(after),
            owner_before: Some(before),
        }
    }

    fn assert_index_agrees(setters: &Setters) {
        assert_eq!(setters.by_key.len(), setters.by_time.len());
        for (key, setter) in &setters.by_key {
            assert_eq!(setters.by_time.get(&(setter.at, setter.id)), Some(key));
        }
        assert!(setters.by_key.len() <= setters.max);
    }

    #[test]
    fn a_bypass_set_in_an_edit_seen_then_used_names_its_setter() {
        let mut setters = Setters::default();
        let annotate = entry("kubectl-annotate", "2027-01-15T08:00:00Z");
        assert_eq!(
            setters.observe("u1", "carol", &set(annotate.clone()), at(0)),
            Some("carol".into())
        );
        // dave's edit (another manager) leaves the annotation's owner as it was.
        let seen = used(annotate.clone(), annotate.clone());
        assert_eq!(
            setters.observe("u1", "dave", &seen, at(1)),
            Some("carol".into())
        );
        assert_eq!(
            setters.observe("u1", "erin", &seen, at(2)),
            Some("carol".into())
        );
        // Another object, another value: nothing known.
        assert_eq!(setters.observe("u2", "dave", &seen, at(3)), None);
    }

    #[test]
    fn a_bypass_removed_and_set_again_unseen_names_no_setter() {
        let mut setters = Setters::default();
        let first = entry("kubectl-annotate", "2027-01-15T08:00:00Z");
        setters.observe("u1", "carol", &set(first.clone()), at(0));
        // Removed and set again to the same value by edits the webhook did not see: the same
        // manager's entry, with another time.
        let again = entry("kubectl-annotate", "2027-01-15T09:00:00Z");
        let seen = used(again.clone(), again.clone());
        assert_eq!(setters.observe("u1", "dave", &seen, at(1)), None);
        // Not named later either, even were the old entry back.
        assert_eq!(
            setters.observe("u1", "dave", &used(first.clone(), first), at(2)),
            None
        );
        assert!(setters.by_key.is_empty());
    }

    #[test]
    fn an_owner_that_cannot_be_read_names_no_setter() {
        let mut setters = Setters::default();
        let first = entry("kubectl-annotate", "2027-01-15T08:00:00Z");
        setters.observe("u1", "carol", &set(first.clone()), at(0));
        let mut seen = used(first.clone(), first);
        seen.owner_before = None;
        assert_eq!(setters.observe("u1", "dave", &seen, at(1)), None);
    }

    #[test]
    fn an_edit_seen_that_moves_the_owner_on_carries_the_setter_with_it() {
        // carol's own later edit (the same manager) moves its entry's time: the webhook saw
        // that edit and that it did not set the annotation, so the setter stays known.
        let mut setters = Setters::default();
        let first = entry("kubectl-annotate", "2027-01-15T08:00:00Z");
        let later = entry("kubectl-annotate", "2027-01-15T08:05:00Z");
        setters.observe("u1", "carol", &set(first.clone()), at(0));
        assert_eq!(
            setters.observe("u1", "carol", &used(first, later.clone()), at(1)),
            Some("carol".into())
        );
        assert_eq!(
            setters.observe("u1", "dave", &used(later.clone(), later), at(2)),
            Some("carol".into())
        );
    }

    #[test]
    fn the_same_value_set_again_by_another_user_seen_names_the_new_user() {
        let mut setters = Setters::default();
        let first = entry("kubectl-annotate", "2027-01-15T08:00:00Z");
        setters.observe("u1", "carol", &set(first.clone()), at(0));
        // Removed (seen or not), then set again by bob in an edit seen.
        let again = entry("kubectl-annotate", "2027-01-15T09:00:00Z");
        assert_eq!(
            setters.observe("u1", "bob", &set(again.clone()), at(1)),
            Some("bob".into())
        );
        assert_eq!(
            setters.observe("u1", "dave", &used(again.clone(), again), at(2)),
            Some("bob".into())
        );
        assert_eq!(setters.by_key.len(), 1);
    }

    #[test]
    fn the_setter_observed_longest_ago_is_forgotten_first() {
        let mut setters = Setters::with_max(3);
        let owner = entry("kubectl-annotate", "2027-01-15T08:00:00Z");
        for (i, uid) in ["a", "b", "c"].into_iter().enumerate() {
            setters.observe(uid, "carol", &set(owner.clone()), at(i as u64));
        }
        // "a" used again: observed latest now; "b" is the oldest.
        setters.observe("a", "dave", &used(owner.clone(), owner.clone()), at(10));
        setters.observe("d", "carol", &set(owner.clone()), at(11));
        assert_index_agrees(&setters);
        let seen = used(owner.clone(), owner);
        assert_eq!(setters.observe("b", "dave", &seen, at(12)), None);
        assert_eq!(
            setters.observe("a", "dave", &seen, at(13)),
            Some("carol".into())
        );
    }

    #[derive(Debug, Clone)]
    enum Step {
        Set {
            object: u8,
            value: u8,
            owner: u8,
        },
        Used {
            object: u8,
            value: u8,
            before: u8,
            after: u8,
        },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0..12u8, 0..2u8, 0..3u8).prop_map(|(object, value, owner)| Step::Set {
                object,
                value,
                owner
            }),
            (0..12u8, 0..2u8, 0..3u8, 0..3u8).prop_map(|(object, value, before, after)| {
                Step::Used {
                    object,
                    value,
                    before,
                    after,
                }
            }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        #[test]
        fn the_index_by_time_always_agrees_with_the_setters(
            steps in proptest::collection::vec((step(), 0..3u64), 1..200),
        ) {
            let mut setters = Setters::with_max(8);
            let owner = |n: u8| entry("kubectl-annotate", &format!("2027-01-15T08:00:0{n}Z"));
            let value = |n: u8| ["true", "2057-01-15T08:00:00Z"][usize::from(n)].to_owned();
            let mut now = 0;
            for (step, advance) in steps {
                // Time moves on, or stands (setters observed at the same time).
                now += advance;
                match step {
                    Step::Set { object, value: v, owner: o } => {
                        let seen = BypassSeen { value: value(v), ..set(owner(o)) };
                        let named = setters.observe(&object.to_string(), "carol", &seen, at(now));
                        proptest::prop_assert_eq!(named, Some("carol".to_owned()));
                    }
                    Step::Used { object, value: v, before, after } => {
                        let seen = BypassSeen { value: value(v), ..used(owner(before), owner(after)) };
                        setters.observe(&object.to_string(), "dave", &seen, at(now));
                    }
                }
                assert_index_agrees(&setters);
            }
        }
    }
}
