//! What comparing two versions of an object found (reference §3 steps 6–9): each changed path judged
//! against the rule's `mutable`, and the violation the uncovered ones make.
//!
//! Admission judges changes as the diff finds them ([`Judging`]) and keeps only what an answer
//! can show (reference §5): the first changes in byte order of their path, and the first uncovered
//! ones, each up to a limit, with every change counted. However large the diff, what it leaves
//! in memory is bounded, and the first uncovered change is still found. The audit, whose changes
//! come from several places, judges a finished list ([`judge`]).

use std::borrow::Cow;
use std::collections::BinaryHeap;

use crate::diff::{Change, ChangeKind, Found, PathStep, Side, Sink};
use crate::json::Node;
use crate::path::{AsSegment, FieldPath, PathPattern, ROOT, render_index, render_segment};
use crate::rule::CompiledRule;

mod items;

use items::ItemThresholds;

/// How many changes of each kind (any, uncovered) an admission evaluation keeps: what the
/// export record details (the most of the answer's bounds, reference §5).
pub const MAX_KEPT_CHANGES: usize = 100;

/// The comparison of a matched UPDATE.
#[derive(Debug, Clone)]
pub struct Comparison<'a> {
    /// Changed paths in byte order of the rendered path, each with whether a `mutable` pattern
    /// covers it: all of them, or — past the evaluation's limit — the first ones in that order
    /// and the first uncovered ones.
    pub changes: Vec<JudgedChange<'a>>,
    /// How many changes were compared in all.
    pub changed_count: usize,
    /// How many of them `mutable` does not cover.
    pub uncovered_count: usize,
    /// The changes `include`/`exclude` leave out (system fields aside); only with
    /// [`crate::Detail::Full`].
    pub excluded: Option<Vec<Change<'a>>>,
    /// `Some` when a change is not covered by `mutable`.
    pub violation: Option<Violation>,
}

/// An UPDATE that changed what its rule does not allow.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Rendered uncovered paths, byte order, without repeats: all, or the first ones.
    pub denied: Vec<String>,
    /// How many different paths are uncovered in all.
    pub denied_count: usize,
}

/// One changed path as judged by the rule.
#[derive(Debug, Clone)]
pub struct JudgedChange<'a> {
    pub change: Change<'a>,
    /// The rendered path (`spec.template.spec.containers[0].image`).
    pub path: String,
    pub mutable: bool,
    /// The audit only: the imperative edit (field manager and time) that changed the path.
    pub edit: Option<ImperativeEdit<'a>>,
    /// The audit only: no declared value is known for the path (the object has no baseline,
    /// or an imperative edit rewrote it), so a missing `old` means unknown, not absent.
    pub declared_unknown: bool,
}

impl<'a> JudgedChange<'a> {
    /// A change not yet judged against `mutable`.
    pub fn new(change: Change<'a>) -> Self {
        Self {
            path: change.path.to_string(),
            change,
            mutable: false,
            edit: None,
            declared_unknown: false,
        }
    }
}

/// Who changed a field imperatively, as `metadata.managedFields` says (reference §8 step 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImperativeEdit<'a> {
    /// The field manager (`kubectl-edit`, `kubectl`…): managedFields name managers, not users.
    pub manager: Cow<'a, str>,
    /// When the manager last wrote the object (`time` of the entry), when it says.
    pub time: Option<Cow<'a, str>>,
}

/// Judges a finished list of changes (the audit's): each against `mutable`, sorted by rendered
/// path; the uncovered ones make the violation.
pub(crate) fn judge_changes<'a>(
    rule: &CompiledRule,
    mut judged: Vec<JudgedChange<'a>>,
    excluded: Option<Vec<Change<'a>>>,
) -> Comparison<'a> {
    for change in &mut judged {
        change.mutable = rule.is_mutable(change.change.path.segments());
    }
    judged.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let uncovered_count = judged.iter().filter(|c| !c.mutable).count();
    let denied = denied_paths(&judged);
    let counts = Counts {
        changed: judged.len(),
        uncovered: uncovered_count,
        denied_paths: denied.len(),
    };
    conclude(judged, denied, counts, excluded)
}

/// How many changes, uncovered changes and uncovered paths a comparison saw.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    changed: usize,
    uncovered: usize,
    denied_paths: usize,
}

/// The uncovered paths of sorted changes, each once.
fn denied_paths(sorted: &[JudgedChange<'_>]) -> Vec<String> {
    let mut denied: Vec<String> = sorted
        .iter()
        .filter(|c| !c.mutable)
        .map(|c| c.path.clone())
        .collect();
    denied.dedup();
    denied
}

fn conclude<'a>(
    changes: Vec<JudgedChange<'a>>,
    denied: Vec<String>,
    counts: Counts,
    excluded: Option<Vec<Change<'a>>>,
) -> Comparison<'a> {
    let violation = (counts.uncovered > 0).then_some(Violation {
        denied,
        denied_count: counts.denied_paths,
    });
    Comparison {
        changes,
        changed_count: counts.changed,
        uncovered_count: counts.uncovered,
        excluded,
        violation,
    }
}

/// A change kept for the answer.
struct Kept<N> {
    rendered: String,
    /// Order of discovery: equal paths keep the diff's order.
    seq: usize,
    path: FieldPath,
    kind: ChangeKind,
    old: Option<Side<N>>,
    new: Option<Side<N>>,
    mutable: bool,
}

impl<N: Clone> Clone for Kept<N> {
    fn clone(&self) -> Self {
        Self {
            rendered: self.rendered.clone(),
            seq: self.seq,
            path: self.path.clone(),
            kind: self.kind,
            old: self.old.clone(),
            new: self.new.clone(),
            mutable: self.mutable,
        }
    }
}

impl<N> Kept<N> {
    fn key(&self) -> (&[u8], usize) {
        (self.rendered.as_bytes(), self.seq)
    }
}

impl<N> PartialEq for Kept<N> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<N> Eq for Kept<N> {}
impl<N> PartialOrd for Kept<N> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<N> Ord for Kept<N> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// The smallest `limit` items pushed into it.
struct Smallest<N> {
    limit: usize,
    heap: BinaryHeap<Kept<N>>,
}

impl<N> Smallest<N> {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            heap: BinaryHeap::new(),
        }
    }

    /// Whether a change at `rendered`, found after every kept one, would be kept.
    fn wants(&self, rendered: &str) -> bool {
        self.heap.len() < self.limit
            || self
                .heap
                .peek()
                .is_some_and(|largest| rendered.as_bytes() < largest.rendered.as_bytes())
    }

    /// [`Self::wants`] for the path `head` followed by `tail`, without joining them.
    fn wants_parts(&self, head: &[u8], tail: &[u8]) -> bool {
        if self.heap.len() < self.limit {
            return true;
        }
        let Some(largest) = self.heap.peek() else {
            return true;
        };
        let largest = largest.rendered.as_bytes();
        let (largest_head, largest_tail) = largest.split_at(head.len().min(largest.len()));
        match head.cmp(largest_head) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => tail < largest_tail,
        }
    }

    /// The largest path kept, once the heap is full (until then every change is kept).
    fn full_largest(&self) -> Option<&[u8]> {
        if self.heap.len() < self.limit {
            return None;
        }
        self.heap.peek().map(|largest| largest.rendered.as_bytes())
    }

    fn push(&mut self, kept: Kept<N>) {
        self.heap.push(kept);
        if self.heap.len() > self.limit {
            self.heap.pop();
        }
    }
}

/// The admission path's sink: judges each change as the diff reports it and keeps the first
/// `limit` changes and the first `limit` uncovered ones (byte order of the path); counts all.
pub(crate) struct Judging<'r, 'a, N> {
    rule: &'r CompiledRule,
    first: Smallest<N>,
    first_uncovered: Smallest<N>,
    counts: Counts,
    seq: usize,
    /// The path being judged, rendered (reused, so a change that is not kept costs no
    /// allocation).
    rendered: String,
    /// The steps of the last path rendered and where each ends in `rendered`: the next
    /// path renders only from where it differs (the items of one list, only their index).
    rendered_steps: Vec<(PathStep<'a>, usize)>,
    /// No mutable pattern names an index: paths that differ only in their last index are
    /// judged alike, so the items of one changed list are judged once.
    index_blind: bool,
    /// Whether the last change judged was mutable.
    last_mutable: bool,
    /// Which items of the list the last path rendered is an item of either heap wants, for
    /// a mutable or an uncovered item (`None` inside: only rendering each item can tell);
    /// decided on its first item after a change of the path rendered or of a heap.
    item_wants: Option<(bool, Option<ItemThresholds>)>,
}

impl<'r, 'a, N: Node<'a>> Judging<'r, 'a, N> {
    pub(crate) fn new(rule: &'r CompiledRule, limit: usize) -> Self {
        Self {
            rule,
            first: Smallest::new(limit),
            first_uncovered: Smallest::new(limit),
            counts: Counts::default(),
            seq: 0,
            rendered: String::new(),
            rendered_steps: Vec::new(),
            index_blind: !rule.mutable.iter().any(PathPattern::names_an_index),
            last_mutable: false,
            item_wants: None,
        }
    }

    /// How `path` relates to the last path rendered: the steps they share, and whether they
    /// differ only in their last step, an index on both (two items of one list).
    fn relate(&self, path: &[PathStep<'a>]) -> (usize, bool) {
        let shared = self
            .rendered_steps
            .iter()
            .zip(path)
            .take_while(|((rendered, _), step)| same_step(rendered, step))
            .count();
        let sibling = self.rendered_steps.len() == path.len()
            && shared + 1 == path.len()
            && matches!(self.rendered_steps.last(), Some((PathStep::Index(_), _)))
            && matches!(path.last(), Some(PathStep::Index(_)));
        (shared, sibling)
    }

    /// Renders `path` into `rendered`, keeping the `shared` steps already rendered.
    fn render(&mut self, path: &[PathStep<'a>], shared: usize) {
        self.item_wants = None;
        if path.is_empty() {
            self.rendered_steps.clear();
            self.rendered.clear();
            self.rendered.push_str(ROOT);
            return;
        }
        self.rendered_steps.truncate(shared);
        let kept = self.rendered_steps.last().map_or(0, |(_, end)| *end);
        self.rendered.truncate(kept);
        for step in &path[shared..] {
            render_segment(&mut self.rendered, 0, step.as_segment());
            self.rendered_steps
                .push((step.clone(), self.rendered.len()));
        }
    }

    /// Whether either heap would keep the item `index` of the list the last path rendered
    /// was an item of, decided without rendering it: from the index alone (see
    /// [`ItemThresholds`]), or else by comparing the list's path and then `[index]` with each
    /// heap's largest.
    fn wants_item(&mut self, index: usize, mutable: bool) -> bool {
        let list_end = match self.rendered_steps.len().checked_sub(2) {
            Some(parent) => self.rendered_steps[parent].1,
            None => 0,
        };
        let list = &self.rendered.as_bytes()[..list_end];
        if !matches!(self.item_wants, Some((decided_for, _)) if decided_for == mutable) {
            let first = ItemThresholds::of(list, self.first.full_largest());
            let thresholds = if mutable {
                first
            } else {
                let uncovered = ItemThresholds::of(list, self.first_uncovered.full_largest());
                first
                    .zip(uncovered)
                    .map(|(first, uncovered)| first.either(&uncovered))
            };
            self.item_wants = Some((mutable, thresholds));
        }
        if let Some((_, Some(thresholds))) = &self.item_wants {
            return thresholds.wants(index);
        }
        let mut buffer = [0; 24];
        let item = render_index(index, &mut buffer);
        self.first.wants_parts(list, item)
            || (!mutable && self.first_uncovered.wants_parts(list, item))
    }

    /// The comparison: what was kept, sorted, and the counts.
    pub(crate) fn finish(self, excluded: Option<Vec<Change<'a>>>) -> Comparison<'a> {
        let mut kept: Vec<Kept<N>> = self.first.heap.into_vec();
        kept.extend(self.first_uncovered.heap.into_vec());
        kept.sort_unstable();
        kept.dedup_by_key(|k| k.seq);
        let changes: Vec<JudgedChange<'a>> = kept
            .into_iter()
            .map(|k| JudgedChange {
                change: Change {
                    path: k.path,
                    kind: k.kind,
                    old: k.old.map(Side::into_lazy_value),
                    new: k.new.map(Side::into_lazy_value),
                },
                path: k.rendered,
                mutable: k.mutable,
                edit: None,
                declared_unknown: false,
            })
            .collect();
        let denied = denied_paths(&changes);
        conclude(changes, denied, self.counts, excluded)
    }
}

/// Equal steps; the keys of one walk are usually the same borrowed text, known equal by address.
#[inline]
fn same_step(a: &PathStep<'_>, b: &PathStep<'_>) -> bool {
    match (a, b) {
        (PathStep::Index(x), PathStep::Index(y)) => x == y,
        (PathStep::Key(x), PathStep::Key(y)) => {
            (x.len() == y.len() && std::ptr::eq(x.as_ptr(), y.as_ptr())) || x == y
        }
        _ => false,
    }
}

impl<'a, N: Node<'a>> Sink<'a, N> for Judging<'_, 'a, N> {
    fn change(&mut self, found: Found<'_, 'a, N>) {
        let path = found.path;
        let (shared, sibling) = self.relate(path);
        // The items of one list, judged alike: judged once, and once none of them can be kept,
        // only counted (a list of millions of changed items is reference §5's worst case).
        let judged_alike = sibling && self.index_blind;
        let mutable = if judged_alike {
            self.last_mutable
        } else {
            self.rule.is_mutable(path)
        };
        self.last_mutable = mutable;
        self.counts.changed += 1;
        if !mutable {
            self.counts.uncovered += 1;
            if !found.repeat {
                self.counts.denied_paths += 1;
            }
        }
        if let (true, Some(PathStep::Index(index))) = (judged_alike, path.last())
            && !self.wants_item(*index, mutable)
        {
            // Not rendered: the last step rendered stays that of an earlier item, which is
            // all the next item of the list is compared with.
            return;
        }
        self.render(path, shared);
        let to_first = self.first.wants(&self.rendered);
        let to_uncovered = !mutable && self.first_uncovered.wants(&self.rendered);
        if !to_first && !to_uncovered {
            return;
        }
        let kept = Kept {
            rendered: self.rendered.clone(),
            seq: self.seq,
            path: found.field_path(),
            kind: found.kind,
            old: found.old,
            new: found.new,
            mutable,
        };
        self.seq += 1;
        self.item_wants = None;
        match (to_first, to_uncovered) {
            (true, true) => {
                self.first_uncovered.push(kept.clone());
                self.first.push(kept);
            }
            (true, false) => self.first.push(kept),
            _ => self.first_uncovered.push(kept),
        }
    }
}
