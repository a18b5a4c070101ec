//! Counters whose label values come from what callers send — a namespace, a resource, a changed
//! field, which anyone who may edit a workload (or, without client authentication, post to the
//! webhook) chooses — kept to a fixed number of series (reference §6 "Metrics", §5 "Memory").
//!
//! A value is cut to [`MAX_LABEL_BYTES`]. Each family admits new series up to its budget, first
//! come first kept; past it an observation is counted under a coarser series, the caller's labels
//! replaced by [`OTHER`] one level at a time (for violations: the field first, then the
//! namespace and resource too), and the last level, which only the closed labels (mode, result)
//! tell apart, is always taken. Series once admitted count on exactly, so an operator keeps
//! every series the dashboard already showed; an observation that was not counted exactly is
//! counted in `drift_sentinel_metric_series_limited_total{metric}` and the first one of each
//! family is logged.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus::{IntCounter, IntCounterVec, Opts};

/// What a label value a caller chose becomes once its family is over budget. A leading `_`
/// makes it no namespace, resource or field path that Kubernetes has.
pub const OTHER: &str = "_other";
/// The longest label value kept; a longer one is cut, ending `…` (a namespace is at most 63
/// bytes, a resource's group/version/resource and a field path rarely more than 100).
pub const MAX_LABEL_BYTES: usize = 128;

/// One level of a family: which labels are replaced by [`OTHER`], and how many series of this
/// level may exist.
struct Level {
    replaced: Vec<usize>,
    max_series: usize,
    /// Hashes of the series admitted (a keyed SipHash of the label values: a value no caller
    /// can aim at another series' hash).
    admitted: RwLock<HashSet<u64>>,
}

/// An `IntCounterVec` with a bounded number of series.
pub struct BoundedCounterVec {
    counters: IntCounterVec,
    levels: Vec<Level>,
    /// The labels a caller chooses (the others take a closed set of values).
    open: Vec<usize>,
    hasher: std::collections::hash_map::RandomState,
    limited: IntCounter,
    name: String,
    warned: AtomicBool,
}

impl BoundedCounterVec {
    /// `opts` and `labels` as for an `IntCounterVec`; `open` names the labels a caller
    /// chooses; `levels` the budget of exact series, then of each coarser level (the labels it
    /// replaces, its budget); `limited` counts what was not counted exactly.
    pub fn new(
        opts: Opts,
        labels: &[&str],
        open: &[&str],
        levels: &[(&[&str], usize)],
        limited: &IntCounterVec,
    ) -> Result<Self, prometheus::Error> {
        let index = |name: &str| {
            labels.iter().position(|l| *l == name).ok_or_else(|| {
                prometheus::Error::Msg(format!("{name} is no label of {}", opts.name))
            })
        };
        let open: Vec<usize> = open.iter().map(|l| index(l)).collect::<Result<_, _>>()?;
        let mut bounded = Vec::with_capacity(levels.len());
        for (replaced, max_series) in levels {
            bounded.push(Level {
                replaced: replaced
                    .iter()
                    .map(|l| index(l))
                    .collect::<Result<_, _>>()?,
                max_series: *max_series,
                admitted: RwLock::new(HashSet::new()),
            });
        }
        Ok(Self {
            limited: limited.with_label_values(&[&opts.name]),
            name: opts.name.clone(),
            counters: IntCounterVec::new(opts, labels)?,
            levels: bounded,
            open,
            hasher: Default::default(),
            warned: AtomicBool::new(false),
        })
    }

    /// The counters, to register.
    pub fn collector(&self) -> Box<dyn prometheus::core::Collector> {
        Box::new(self.counters.clone())
    }

    /// Counts one observation of `values` (one per label, in order), exactly while the family
    /// has room and under a coarser series past it.
    pub fn inc<const N: usize>(&self, values: [&str; N]) {
        let cut = values.map(cut_value);
        let mut series: [&str; N] = std::array::from_fn(|i| cut[i].as_ref());
        for level in &self.levels {
            for &label in &level.replaced {
                series[label] = OTHER;
            }
            if self.admit(level, &series) {
                self.counters.with_label_values(&series).inc();
                return;
            }
        }
        for &label in &self.open {
            series[label] = OTHER;
        }
        self.counters.with_label_values(&series).inc();
        self.limited.inc();
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                metric = self.name.as_str(),
                "metric series limit reached: new label values are counted as \"_other\" from now on (reference §6); drift_sentinel_metric_series_limited_total counts them"
            );
        }
    }

    /// Whether `series` is, or may become, one of `level`'s.
    fn admit(&self, level: &Level, series: &[&str]) -> bool {
        let key = self.hasher.hash_one(series);
        let known = level
            .admitted
            .read()
            .map(|admitted| admitted.contains(&key))
            .unwrap_or(false);
        if known {
            return true;
        }
        let Ok(mut admitted) = level.admitted.write() else {
            return false;
        };
        if admitted.len() < level.max_series {
            admitted.insert(key);
            return true;
        }
        admitted.contains(&key)
    }
}

/// `value` cut to [`MAX_LABEL_BYTES`], without a copy when it fits.
pub fn cut_value(value: &str) -> std::borrow::Cow<'_, str> {
    if value.len() <= MAX_LABEL_BYTES {
        value.into()
    } else {
        drift_engine::truncate::truncate_bytes(value, MAX_LABEL_BYTES).into()
    }
}

/// The `count` largest of `values` by their count, each label cut; the rest summed under
/// [`OTHER`]: what a gauge by a caller-chosen label (the audit's drifted objects by rule) is set
/// to, so that it holds at most `count + 1` series.
pub fn largest<'v>(
    values: impl IntoIterator<Item = (&'v str, u64)>,
    count: usize,
) -> Vec<(String, u64)> {
    let mut summed: std::collections::BTreeMap<String, u64> = Default::default();
    for (label, n) in values {
        *summed.entry(cut_value(label).into_owned()).or_default() += n;
    }
    let mut sorted: Vec<(String, u64)> = summed.into_iter().collect();
    // Largest first; equal counts in label order.
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if sorted.len() > count {
        let rest: u64 = sorted[count..].iter().map(|(_, n)| n).sum();
        sorted.truncate(count);
        sorted.push((OTHER.to_owned(), rest));
    }
    sorted
}

#[cfg(test)]
mod tests {
    use prometheus::core::Collector as _;

    use super::*;

    fn family(levels: &[(&[&str], usize)]) -> (BoundedCounterVec, IntCounterVec) {
        let limited = IntCounterVec::new(Opts::new("limited", "h"), &["metric"]).unwrap();
        let family = BoundedCounterVec::new(
            Opts::new("violations", "h"),
            &["namespace", "field", "mode"],
            &["namespace", "field"],
            levels,
            &limited,
        )
        .unwrap();
        (family, limited)
    }

    fn count(family: &BoundedCounterVec, values: &[&str]) -> u64 {
        family.counters.with_label_values(values).get()
    }

    fn series(family: &BoundedCounterVec) -> usize {
        family.counters.collect()[0].get_metric().len()
    }

    #[test]
    fn past_its_budget_a_family_counts_under_coarser_series() {
        let (family, limited) = family(&[(&[], 3), (&["field"], 2)]);
        // Three exact series; repeats of them stay exact.
        for field in ["a", "b", "c", "a", "a"] {
            family.inc(["ns1", field, "enforce"]);
        }
        assert_eq!(count(&family, &["ns1", "a", "enforce"]), 3);
        // The fourth field: its namespace kept, the field replaced; then a second namespace.
        family.inc(["ns1", "d", "enforce"]);
        family.inc(["ns2", "e", "warn"]);
        assert_eq!(count(&family, &["ns1", OTHER, "enforce"]), 1);
        assert_eq!(count(&family, &["ns2", OTHER, "warn"]), 1);
        // The coarse level is full too: everything open replaced, the mode kept.
        for n in 0..100 {
            family.inc([&format!("ns-{n}"), &format!("f-{n}"), "enforce"]);
        }
        assert_eq!(count(&family, &[OTHER, OTHER, "enforce"]), 100);
        // Series admitted before still count exactly.
        family.inc(["ns1", "b", "enforce"]);
        assert_eq!(count(&family, &["ns1", "b", "enforce"]), 2);
        assert_eq!(series(&family), 3 + 2 + 1);
        assert_eq!(limited.with_label_values(&["violations"]).get(), 100);
    }

    #[test]
    fn long_values_are_cut() {
        let (family, _) = family(&[(&[], 10)]);
        let long = "n".repeat(2 << 20);
        family.inc([&long, "spec.replicas", "enforce"]);
        let metrics = family.counters.collect();
        let labels = metrics[0].get_metric()[0].get_label();
        let namespace = labels.iter().find(|l| l.name() == "namespace");
        let label = namespace.unwrap().value().to_owned();
        assert!(
            label.len() <= MAX_LABEL_BYTES && label.ends_with('…'),
            "{label}"
        );
    }

    #[test]
    fn the_largest_are_kept_and_the_rest_summed() {
        let values = [("a/x", 5), ("b/y", 1), ("c/z", 7), ("d/w", 1)];
        assert_eq!(
            largest(values, 2),
            [("c/z".into(), 7), ("a/x".into(), 5), (OTHER.into(), 2)]
        );
        assert_eq!(largest(values, 4).len(), 4);
        // Values cut to the same label are summed, not overwritten.
        let long = |c: &str| format!("{}{c}", "r".repeat(MAX_LABEL_BYTES));
        let (a, b) = (long("a"), long("b"));
        assert_eq!(largest([(a.as_str(), 1), (b.as_str(), 2)], 5)[0].1, 3);
    }
}
