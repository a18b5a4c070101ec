//! Numbers for the API server benchmark: quantiles of latencies, and of a Prometheus histogram
//! read from the API server's `/metrics`.

use std::collections::BTreeMap;

/// p50 and p99 in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
}

/// The p50 and p99 of latencies in milliseconds (nearest rank).
pub fn quantiles(latencies: &[f64]) -> Quantiles {
    let mut sorted = latencies.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    };
    Quantiles {
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// The median of some values (NaN for none).
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// An estimate with a 90 % interval.
#[derive(Debug, Clone, Copy)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:+.2} [{:+.2}, {:+.2}]",
            self.estimate, self.low, self.high
        )
    }
}

/// How many times the rounds are drawn again for an interval.
const RESAMPLES: usize = 1000;

/// How the p50 and the p99 of `setup`'s latencies differ from `base`'s, each given as rounds
/// of samples: the estimate from every round pooled, and a 90 % interval from drawing each
/// side's rounds again with replacement. Whole rounds are drawn, not single calls, because
/// what moves on a shared machine is the state of a round (another process, the page
/// cache), which the calls of one round share. NaN without samples on either side.
pub fn difference(setup: &[Vec<f64>], base: &[Vec<f64>]) -> [Interval; 2] {
    let pooled = |rounds: &[&Vec<f64>]| {
        let all: Vec<f64> = rounds.iter().flat_map(|r| r.iter().copied()).collect();
        let q = quantiles(&all);
        [q.p50, q.p99]
    };
    let every = |rounds: &[Vec<f64>]| -> [f64; 2] { pooled(&rounds.iter().collect::<Vec<_>>()) };
    let (a, b) = (every(setup), every(base));
    let mut random = SplitMix(0x5eed);
    let mut draws: [Vec<f64>; 2] = Default::default();
    for _ in 0..RESAMPLES {
        let mut draw = |rounds: &[Vec<f64>]| {
            let picked: Vec<&Vec<f64>> = (0..rounds.len())
                .map(|_| &rounds[random.below(rounds.len())])
                .collect();
            pooled(&picked)
        };
        let (x, y) = (draw(setup), draw(base));
        for q in 0..2 {
            draws[q].push(x[q] - y[q]);
        }
    }
    std::array::from_fn(|q| {
        let sorted = &mut draws[q];
        sorted.sort_by(f64::total_cmp);
        let at = |p: f64| sorted.get((p * sorted.len() as f64) as usize).copied();
        Interval {
            estimate: a[q] - b[q],
            low: at(0.05).unwrap_or(f64::NAN),
            high: at(0.95).unwrap_or(f64::NAN),
        }
    })
}

/// A small seeded generator (SplitMix64), so that a run's intervals can be drawn again.
struct SplitMix(u64);

impl SplitMix {
    /// A number below `n` (0 for n = 0).
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if n == 0 { 0 } else { (z % n as u64) as usize }
    }
}

/// A positive whole number from the environment, or `default`.
pub fn env_number(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) => match text.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => anyhow::bail!("{name} must be a positive whole number (got {text:?})"),
        },
    }
}

/// A cumulative histogram: count at or below each upper bound (seconds), summed over the
/// series that matched.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    buckets: BTreeMap<OrderedBound, f64>,
}

/// An upper bound, ordered (`+Inf` last).
#[derive(Debug, Clone, Copy)]
struct OrderedBound(f64);
impl PartialEq for OrderedBound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for OrderedBound {}
impl PartialOrd for OrderedBound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedBound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Histogram {
    /// The buckets of `metric` from a Prometheus text exposition, over every series whose
    /// labels contain `label`.
    pub fn parse(text: &str, metric: &str, label: &str) -> Self {
        let mut buckets = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(metric) else {
                continue;
            };
            if !rest.starts_with('{') || !rest.contains(label) {
                continue;
            }
            let Some(le) = rest.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else {
                continue;
            };
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            let count: f64 = rest
                .rsplit(' ')
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0.0);
            *buckets.entry(OrderedBound(bound)).or_insert(0.0) += count;
        }
        Self { buckets }
    }

    /// Observations in all.
    pub fn count(&self) -> f64 {
        self.buckets
            .get(&OrderedBound(f64::INFINITY))
            .copied()
            .unwrap_or(0.0)
    }

    /// What was observed after `earlier`.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let buckets = self
            .buckets
            .iter()
            .map(|(bound, count)| {
                (
                    *bound,
                    count - earlier.buckets.get(bound).copied().unwrap_or(0.0),
                )
            })
            .collect();
        Self { buckets }
    }

    /// p50 and p99 in milliseconds, interpolated linearly within a bucket (as Prometheus's
    /// `histogram_quantile` does); NaN without observations.
    pub fn quantiles_ms(&self) -> Quantiles {
        Quantiles {
            p50: self.quantile(0.50) * 1000.0,
            p99: self.quantile(0.99) * 1000.0,
        }
    }

    fn quantile(&self, q: f64) -> f64 {
        let total = self.count();
        if total <= 0.0 {
            return f64::NAN;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for (OrderedBound(bound), &count) in &self.buckets {
            if count >= rank {
                if bound.is_infinite() {
                    return lower;
                }
                let inside = count - below;
                return if inside > 0.0 {
                    lower + (bound - lower) * (rank - below) / inside
                } else {
                    *bound
                };
            }
            (lower, below) = (*bound, count);
        }
        lower
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds of 300 calls at `offset` + 0..10 ms, each round shifted by its own `drift`.
    fn rounds(offset: f64, drifts: &[f64]) -> Vec<Vec<f64>> {
        drifts
            .iter()
            .map(|drift| {
                (0..300)
                    .map(|i| offset + drift + (i % 100) as f64 / 10.0)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_difference_has_an_interval_as_wide_as_the_rounds_disagree() {
        // Steady rounds: the interval is the estimate itself.
        let [p50, p99] = difference(&rounds(2.0, &[0.0; 6]), &rounds(0.0, &[0.0; 6]));
        assert!(
            (p50.estimate - 2.0).abs() < 1e-9 && p50.low == p50.high,
            "{p50:?}"
        );
        assert!((p99.estimate - 2.0).abs() < 1e-9, "{p99:?}");
        // Rounds that drift by up to 3 ms: the interval widens and still holds the truth.
        let drifts = [0.0, 3.0, 1.0, 0.0, 2.0, 0.5];
        let [p50, _] = difference(&rounds(2.0, &drifts), &rounds(0.0, &drifts));
        assert!(p50.low < 2.0 && 2.0 < p50.high, "{p50:?}");
        assert!(p50.high - p50.low > 0.5, "{p50:?}");
        // No samples on one side: nothing to say.
        let [p50, _] = difference(&rounds(2.0, &drifts), &[]);
        assert!(p50.estimate.is_nan() && p50.low.is_nan(), "{p50:?}");
    }

    #[test]
    fn a_histogram_is_read_and_interpolated() {
        let text = "# HELP x\nm_bucket{name=\"a\",le=\"0.005\"} 50\nm_bucket{name=\"a\",le=\"0.01\"} 90\nm_bucket{name=\"a\",le=\"+Inf\"} 100\nm_bucket{name=\"b\",le=\"0.005\"} 7\n";
        let h = Histogram::parse(text, "m_bucket", "name=\"a\"");
        assert_eq!(h.count(), 100.0);
        let q = h.quantiles_ms();
        assert!((q.p50 - 5.0).abs() < 1e-9, "{q:?}");
        assert!((q.p99 - 10.0).abs() < 1e-9, "{q:?}");
    }
}
