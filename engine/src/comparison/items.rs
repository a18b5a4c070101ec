//! Which items of a changed list a full heap of kept changes would still take, decided once
//! per list and heap state from the index alone.
//!
//! Kept changes are the first in byte order of their rendered path (reference §5), and `[10]` sorts
//! before `[2]`: whether item `i` of a list renders below the heap's largest path is a question
//! about the decimal digits of `i`. When that largest path is itself an item of the list, `[D]`
//! with `n` digits, the answer is one threshold per digit count `L` of `i` — `]` sorts after
//! every digit — so `list[i]` sorts below `list[D]` exactly when
//! - `L < n`: `i < D / 10^(n-L)` (`i` equal to D's first digits sorts after: `]` > digit),
//! - `L = n`: `i < D`,
//! - `L > n`: `i < (D + 1) · 10^(L-n)` (D's digits followed by more sort before `]`).
//!
//! A list of millions of changed items is then judged with one comparison per item instead of
//! rendering every index and comparing it with each heap's largest.

use std::cmp::Ordering;

/// The most decimal digits of a `usize` index.
const MAX_DIGITS: usize = 20;

/// Which items of one list a heap wants: item `i` when `i < below[digits of i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ItemThresholds([u128; MAX_DIGITS + 1]);

impl ItemThresholds {
    /// Every item: the heap is not full, or the list sorts before its largest path.
    const ALL: Self = Self([u128::MAX; MAX_DIGITS + 1]);
    /// No item: the list, and so each of its items, sorts after the largest path.
    const NOTHING: Self = Self([0; MAX_DIGITS + 1]);

    /// For the items of the list whose path renders as `list`, given the heap's largest kept
    /// path (`None` while the heap is not full); `None` when only rendering each item can tell
    /// (the largest path lies inside an item of the list).
    pub(super) fn of(list: &[u8], largest: Option<&[u8]>) -> Option<Self> {
        let Some(largest) = largest else {
            return Some(Self::ALL);
        };
        let (head, tail) = largest.split_at(list.len().min(largest.len()));
        match list.cmp(head) {
            Ordering::Less => Some(Self::ALL),
            // Also when the largest path is a prefix of the list's: each item is longer.
            Ordering::Greater => Some(Self::NOTHING),
            Ordering::Equal if tail.is_empty() => Some(Self::NOTHING),
            Ordering::Equal => rendered_index(tail).map(|index| Self(thresholds(index))),
        }
    }

    /// The items either of two heaps wants.
    pub(super) fn either(mut self, other: &Self) -> Self {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine = (*mine).max(theirs);
        }
        self
    }

    #[inline]
    pub(super) fn wants(&self, index: usize) -> bool {
        let index = index as u64;
        u128::from(index) < self.0[digits(index)]
    }
}

/// The number of decimal digits of `value`.
#[inline]
fn digits(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// `D` of a tail that is exactly `[D]` as an index renders (no leading zero).
fn rendered_index(tail: &[u8]) -> Option<u64> {
    let digits = tail.strip_prefix(b"[")?.strip_suffix(b"]")?;
    let canonical = digits == b"0" || matches!(digits.first(), Some(b'1'..=b'9'));
    if !canonical || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |value, digit| {
        value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

/// The threshold per digit count (index 0 unused) for items below `[index]`. Exact in `u128`:
/// `(D + 1) · 10^(L-n) ≤ 10^L ≤ 10^20`.
fn thresholds(index: u64) -> [u128; MAX_DIGITS + 1] {
    let n = digits(index);
    let index = u128::from(index);
    let mut below = [0; MAX_DIGITS + 1];
    for (length, threshold) in below.iter_mut().enumerate().skip(1) {
        *threshold = match length.cmp(&n) {
            Ordering::Less => index / 10u128.pow((n - length) as u32),
            Ordering::Equal => index,
            Ordering::Greater => (index + 1) * 10u128.pow((length - n) as u32),
        };
    }
    below
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::render_index;
    use proptest::prelude::*;

    /// What the decision stands for: `list` followed by `[index]` sorts below `largest`.
    fn renders_below(list: &[u8], largest: &[u8], index: usize) -> bool {
        let mut buffer = [0; 24];
        let mut path = list.to_vec();
        path.extend_from_slice(render_index(index, &mut buffer));
        path.as_slice() < largest
    }

    #[test]
    fn table() {
        let list = b"spec.args";
        let cases: &[(&[u8], usize, Option<bool>)] = &[
            (b"spec.args[1000011]", 2, Some(false)),
            (b"spec.args[1000011]", 1, Some(false)),
            (b"spec.args[1000011]", 10, Some(false)),
            (b"spec.args[1000011]", 0, Some(true)),
            (b"spec.args[1000011]", 100000, Some(true)),
            (b"spec.args[1000011]", 100001, Some(false)),
            (b"spec.args[1000011]", 1000010, Some(true)),
            (b"spec.args[1000011]", 1000011, Some(false)),
            (b"spec.args[1000011]", 10000110, Some(true)),
            (b"spec.args[1000011]", 10000120, Some(false)),
            (b"spec.args[0]", 0, Some(false)),
            (b"spec.args[0]", 5, Some(false)),
            (b"spec.args[5]", 0, Some(true)),
            (b"spec.args[5]", 49, Some(true)),
            (b"spec.args[5]", 5, Some(false)),
            (b"spec.args[5]", 50, Some(true)),
            (b"spec.args[5]", 6, Some(false)),
            (b"spec.args[5].name", 5, None),
            (b"spec.args", 0, Some(false)),
            (b"spec.arg", 0, Some(false)),
            (b"spec.argsX", 0, None),
            (b"spec.b", 7, Some(true)),
            (b"spec.a", 7, Some(false)),
            (b"spec.args[05]", 1, None),
        ];
        for &(largest, index, want) in cases {
            let decision =
                ItemThresholds::of(list, Some(largest)).map(|decided| decided.wants(index));
            assert_eq!(
                decision,
                want,
                "{} below {}",
                index,
                String::from_utf8_lossy(largest)
            );
            if let Some(decided) = decision {
                assert_eq!(decided, renders_below(list, largest, index));
            }
        }
        assert!(ItemThresholds::of(list, None).is_some_and(|all| all.wants(123)));
    }

    fn path_bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                Just(b'a'),
                Just(b'.'),
                Just(b'['),
                Just(b']'),
                Just(b'0'),
                Just(b'1'),
                Just(b'9')
            ],
            0..8,
        )
    }

    proptest! {
        /// Decided from the index alone, the answer is the byte comparison of the rendered path.
        #[test]
        fn decides_as_the_rendered_path_compares(
            list in path_bytes(),
            largest_index in proptest::option::of(0usize..3_000_000),
            suffix in path_bytes(),
            index in prop_oneof![0usize..3_000_000, Just(usize::MAX), Just(0)],
        ) {
            let largest = match largest_index {
                Some(at) => {
                    let mut buffer = [0; 24];
                    let mut largest = list.clone();
                    largest.extend_from_slice(render_index(at, &mut buffer));
                    largest.extend_from_slice(&suffix);
                    largest
                }
                None => suffix.clone(),
            };
            if let Some(decided) = ItemThresholds::of(&list, Some(&largest)) {
                prop_assert_eq!(decided.wants(index), renders_below(&list, &largest, index));
            }
        }
    }
}
