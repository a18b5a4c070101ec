//! Lists in the diff (reference §4): aligned by merge key as strategic merge patch does, or by
//! index. Lists whose elements keep their places — nearly every list of an update — are walked
//! as two streams, without an index of either; only a list whose elements moved, appeared or
//! went is read into memory to be aligned.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

use super::{ChangeKind, Coverage, PathStep, Side, Sink, Walker, present};
use crate::json::{Node, Shape};

/// The items of a list, or none for a side that is not one.
#[derive(Clone)]
struct ItemsOf<I>(Option<I>);

impl<I: Iterator> Iterator for ItemsOf<I> {
    type Item = I::Item;

    #[inline]
    fn next(&mut self) -> Option<I::Item> {
        self.0.as_mut()?.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.as_ref().map_or((0, Some(0)), Iterator::size_hint)
    }
}

fn items_of<'a, N: Node<'a>>(list: Option<N>) -> ItemsOf<N::Items> {
    ItemsOf(list.and_then(N::items))
}

/// The number of items, without a pass when the iterator knows it.
fn count<I: Iterator>(items: I) -> usize {
    match items.size_hint() {
        (low, Some(high)) if low == high => low,
        _ => items.count(),
    }
}

impl<'a, N: Node<'a>, K: Sink<'a, N>> Walker<'_, 'a, N, K> {
    /// Two present lists.
    pub(super) fn walk_lists(&mut self, old: N, new: N, coverage: Coverage) {
        // Aligning costs more than comparing: align only lists that differ.
        if let Some(first) = first_difference(items_of(Some(old)), items_of(Some(new))) {
            self.walk_differing_lists(Some(old), Some(new), first, coverage);
        }
    }

    /// A key whose value became or stopped being a list, descended into: the missing side
    /// has no elements.
    pub(super) fn walk_retyped_lists(
        &mut self,
        old: Option<N>,
        new: Option<N>,
        coverage: Coverage,
    ) {
        let first = first_difference(items_of(old), items_of(new)).unwrap_or(0);
        self.walk_differing_lists(old, new, first, coverage);
    }

    /// Walks two lists that differ; the elements before `first_difference` are known equal.
    fn walk_differing_lists(
        &mut self,
        old: Option<N>,
        new: Option<N>,
        first_difference: usize,
        coverage: Coverage,
    ) {
        let field = match self.path.last() {
            Some(PathStep::Key(key)) => Some(key.clone()),
            _ => None,
        };
        let (old_items, new_items) = (items_of(old), items_of(new));
        let merge_key = merge_key_for(field.as_deref(), old_items.clone(), new_items.clone());
        let by_position = match merge_key {
            // Aligned by index (scalars, mixed lists): position i pairs with position i and
            // the longer list's tail is added or removed — never counted or collected, since
            // a list of millions of changed numbers is the worst case of reference §5.
            None => true,
            // Every element keeps its place: no reordering, nothing added or removed.
            Some(key) => {
                count(old_items.clone()) == count(new_items.clone())
                    && same_keys_by_position(key, old_items.clone(), new_items.clone())
            }
        };
        if by_position {
            self.walk_by_position(old_items, new_items, first_difference, coverage);
            return;
        }
        let old_list: Vec<N> = old_items.collect();
        let new_list: Vec<N> = new_items.collect();
        let alignment = align(merge_key, &old_list, &new_list);
        if self.reordered(&alignment, &old_list, &new_list, coverage) {
            let (old_value, new_value) = match coverage {
                Coverage::InExceptBelow | Coverage::OnlyBelow => (
                    self.project_list(items_of(old), coverage)
                        .map(Side::Projected),
                    self.project_list(items_of(new), coverage)
                        .map(Side::Projected),
                ),
                _ => (old.map(Side::Node), new.map(Side::Node)),
            };
            self.record(ChangeKind::Reordered, old_value, new_value, false);
        }

        for &(old_index, new_index) in &alignment.kept {
            self.path.push(PathStep::Index(new_index));
            let child = self.scope.child_coverage(coverage, &self.path);
            self.walk(Some(old_list[old_index]), Some(new_list[new_index]), child);
            self.path.pop();
        }
        // An element removed at an index where another is added: two changes, one path.
        let mut reported_removed = Vec::new();
        for &index in &alignment.removed {
            if self.whole_element(index, Some(old_list[index]), None, coverage, false) {
                reported_removed.push(index);
            }
        }
        for &index in &alignment.added {
            let repeat = reported_removed.binary_search(&index).is_ok();
            self.whole_element(index, None, Some(new_list[index]), coverage, repeat);
        }
    }

    /// Walks two lists whose elements pair by position, as streams; the longer list's tail
    /// is reported element by element, removed or added.
    fn walk_by_position(
        &mut self,
        mut old_items: ItemsOf<N::Items>,
        mut new_items: ItemsOf<N::Items>,
        first_difference: usize,
        coverage: Coverage,
    ) {
        let mut index = 0;
        let (old_rest, new_rest) = loop {
            match (old_items.next(), new_items.next()) {
                (Some(old_item), Some(new_item)) => {
                    if index >= first_difference {
                        self.walk_pair(
                            index,
                            old_item,
                            new_item,
                            index > first_difference,
                            coverage,
                        );
                    }
                    index += 1;
                }
                (old_item, new_item) => {
                    break (
                        old_item.into_iter().chain(old_items),
                        new_item.into_iter().chain(new_items),
                    );
                }
            }
        };
        for (offset, item) in old_rest.enumerate() {
            self.whole_element(index + offset, Some(item), None, coverage, false);
        }
        for (offset, item) in new_rest.enumerate() {
            self.whole_element(index + offset, None, Some(item), coverage, false);
        }
    }

    /// Two elements at one position. `may_be_equal`: false for the first difference, known
    /// to differ. Identical elements are settled by their text; others are walked (a walk finds
    /// nothing in equal ones, and comparing by value first costs a deep chain the square of
    /// its depth).
    #[inline]
    fn walk_pair(
        &mut self,
        index: usize,
        old_item: N,
        new_item: N,
        may_be_equal: bool,
        coverage: Coverage,
    ) {
        let (old_shape, new_shape) = (old_item.shape(), new_item.shape());
        let scalars = old_shape.is_scalar() && new_shape.is_scalar();
        // Two scalars are compared once, here; anything else is walked unless equal.
        let equal = if scalars {
            old_shape == new_shape && old_item.scalar_eq(new_item)
        } else {
            may_be_equal && old_item.identical(new_item)
        };
        if equal {
            return;
        }
        self.path.push(PathStep::Index(index));
        let child = self.scope.child_coverage(coverage, &self.path);
        if !scalars {
            self.walk(Some(old_item), Some(new_item), child);
        } else if child == Coverage::In && old_shape != Shape::Null && new_shape != Shape::Null {
            // Two present scalars, compared whole: what `changed_node` concludes, without its
            // general tests (a list of millions of changed numbers is reference §5's worst case).
            let (old_side, new_side) = (Side::Node(old_item), Side::Node(new_item));
            self.record(ChangeKind::Modified, Some(old_side), Some(new_side), false);
        } else if child != Coverage::Out {
            self.changed_node(Some(old_item), Some(new_item), child);
        }
        self.path.pop();
    }

    /// Whether kept elements changed their relative order (by new index, a decrease in old
    /// index). Under partial coverage only elements that have something in scope count.
    fn reordered(
        &mut self,
        alignment: &Alignment,
        old: &[N],
        new: &[N],
        coverage: Coverage,
    ) -> bool {
        let mut last_old = None;
        for &(old_index, new_index) in &alignment.kept {
            if coverage.is_partial() {
                let in_scope = self.has_scoped_content(old[old_index], old_index)
                    || self.has_scoped_content(new[new_index], new_index);
                if !in_scope {
                    continue;
                }
            }
            if last_old.is_some_and(|last| old_index < last) {
                return true;
            }
            last_old = Some(old_index);
        }
        false
    }

    /// An added or removed list element: reported whole at its index, never descended into.
    /// Whether a change was reported.
    fn whole_element(
        &mut self,
        index: usize,
        old: Option<N>,
        new: Option<N>,
        coverage: Coverage,
        repeat: bool,
    ) -> bool {
        self.path.push(PathStep::Index(index));
        let child = self.scope.child_coverage(coverage, &self.path);
        let mut reported = false;
        if child != Coverage::Out {
            // An element exists even when its value is empty: under full coverage it is
            // reported as it is; under partial coverage only if something of it is in scope.
            let element = |walker: &mut Self, v: N| match child {
                Coverage::In => Some(Side::Node(v)),
                _ => walker.scoped(v, child),
            };
            let old_value = old.and_then(|v| element(self, v));
            let new_value = new.and_then(|v| element(self, v));
            if old_value.is_some() || new_value.is_some() {
                let kind = if new.is_some() {
                    ChangeKind::Added
                } else {
                    ChangeKind::Removed
                };
                self.record(kind, old_value, new_value, repeat);
                reported = true;
            }
        }
        self.path.pop();
        reported
    }

    fn has_scoped_content(&mut self, element: N, index: usize) -> bool {
        self.path.push(PathStep::Index(index));
        let coverage = self.scope.coverage(&self.path);
        let found = self.scoped(element, coverage).is_some();
        self.path.pop();
        found
    }

    /// [`Walker::scoped_eq`] of two lists under partial coverage: equal when neither has
    /// anything in scope, or both have and they are as long and equal element by element
    /// (an element with nothing in scope counts as absent, as its projection is `null`).
    pub(super) fn scoped_lists_eq(&mut self, a: N, b: N, coverage: Coverage) -> bool {
        let (a_in, b_in) = (
            self.scoped(a, coverage).is_some(),
            self.scoped(b, coverage).is_some(),
        );
        if !a_in || !b_in {
            return a_in == b_in;
        }
        let (Some(mut x), Some(mut y)) = (a.items(), b.items()) else {
            return false;
        };
        let mut index = 0;
        loop {
            let (item_a, item_b) = match (x.next(), y.next()) {
                (None, None) => return true,
                (Some(item_a), Some(item_b)) => (item_a, item_b),
                _ => return false,
            };
            self.path.push(PathStep::Index(index));
            let child = self.scope.child_coverage(coverage, &self.path);
            let equal = match child {
                // Wholly in scope, an element counts as it is (see `project_list`).
                Coverage::In => super::value_eq_at(item_a, item_b, self.zeros.place_at(&self.path)),
                _ => crate::nesting::guarded(|| self.scoped_eq(Some(item_a), Some(item_b), child)),
            };
            self.path.pop();
            if !equal {
                return false;
            }
            index += 1;
        }
    }

    pub(super) fn project_list(
        &mut self,
        items: impl Iterator<Item = N>,
        coverage: Coverage,
    ) -> Option<Value> {
        let mut any = false;
        let mut out = Vec::new();
        for (index, item) in items.enumerate() {
            self.path.push(PathStep::Index(index));
            let child = self.scope.child_coverage(coverage, &self.path);
            // An element exists even when its value is empty (`[null]` is not `[]`): wholly
            // in scope it counts as it is, as it does under full coverage.
            let projected = match child {
                Coverage::In => Some(item.to_value().into_owned()),
                _ => crate::nesting::guarded(|| self.project(item, child)),
            };
            self.path.pop();
            any |= projected.is_some();
            out.push(projected.unwrap_or(Value::Null));
        }
        any.then_some(Value::Array(out))
    }
}

/// The index of the first element pair that is not the same text (or the same value in
/// memory), or the shorter length when one list extends the other; `None` when the lists are
/// identical. Not compared by value: the walk that follows finds nothing in elements that are
/// equal all the same, and comparing by value first would walk each level of a deep chain of
/// lists once per level above it.
fn first_difference<'a, N: Node<'a>>(
    x: impl Iterator<Item = N>,
    y: impl Iterator<Item = N>,
) -> Option<usize> {
    let (mut x, mut y) = (x, y);
    let mut index = 0;
    loop {
        match (x.next(), y.next()) {
            (None, None) => return None,
            (Some(a), Some(b)) if a.identical(b) => index += 1,
            _ => return Some(index),
        }
    }
}

/// Which old element corresponds to which new one.
#[derive(Debug, Default, PartialEq, Eq)]
struct Alignment {
    /// (old index, new index), in new-index order.
    kept: Vec<(usize, usize)>,
    removed: Vec<usize>,
    added: Vec<usize>,
}

/// The merge key of a list, decided by the list's own field name first (as strategic merge
/// patch does), then by `name`. Also what [`crate::apply`] merges lists by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MergeKey {
    Field(&'static str),
    /// `(containerPort | port, protocol)`, a missing protocol being TCP.
    Port(&'static str),
}

pub(crate) fn merge_key_for<'a, N: Node<'a>, I: Iterator<Item = N> + Clone>(
    list_name: Option<&str>,
    old: I,
    new: I,
) -> Option<MergeKey> {
    let all = || old.clone().chain(new.clone());
    if !all().all(|v| v.shape() == Shape::Object) {
        return None;
    }
    let key = match list_name {
        Some("volumeMounts") => MergeKey::Field("mountPath"),
        Some("volumeDevices") => MergeKey::Field("devicePath"),
        Some("hostAliases") => MergeKey::Field("ip"),
        Some("ports") => {
            if all().all(|v| present(v.get("containerPort")).is_some()) {
                MergeKey::Port("containerPort")
            } else {
                MergeKey::Port("port")
            }
        }
        _ => MergeKey::Field("name"),
    };
    Some(key)
}

pub(crate) fn element_key<'a, N: Node<'a>>(key: MergeKey, element: N) -> Option<Cow<'a, str>> {
    match key {
        MergeKey::Field(name) => element.get(name)?.as_str(),
        MergeKey::Port(name) => {
            let (port, protocol) = port_key(element, name);
            Some(Cow::Owned(format!("{}/{}", port?, protocol?)))
        }
    }
}

/// Whether two lists of the same length, keyed by `key`, hold the same key at each position:
/// whether the list is then aligned by key (keys unique) or by index (a key missing or
/// repeated, on both sides alike), position `i` pairs with position `i`. Decided in one pass
/// over both, without allocating.
fn same_keys_by_position<'a, N: Node<'a>, I: Iterator<Item = N>>(
    key: MergeKey,
    old: I,
    new: I,
) -> bool {
    match key {
        // Elements of the same text hold the same key: most are not read at all.
        MergeKey::Field(name) => old.zip(new).all(|(a, b)| {
            a.identical(b) || a.get(name).and_then(N::as_str) == b.get(name).and_then(N::as_str)
        }),
        MergeKey::Port(name) => old
            .zip(new)
            .all(|(a, b)| a.identical(b) || port_key(a, name) == port_key(b, name)),
    }
}

/// `(port, protocol)` of a ports element, a missing protocol being TCP. Keys are read as
/// normalised (§4): an absent-like protocol is a missing one, and so is `""`, the zero the API
/// server leaves out (and defaults to TCP).
fn port_key<'a, N: Node<'a>>(element: N, name: &str) -> (Option<f64>, Option<Cow<'a, str>>) {
    let protocol = match present(element.get("protocol")).map(N::as_str) {
        None => Some(Cow::Borrowed("TCP")),
        Some(Some(p)) if p.is_empty() => Some(Cow::Borrowed("TCP")),
        Some(p) => p,
    };
    (element.get(name).and_then(N::as_f64), protocol)
}

/// Lists up to this long are aligned by scanning instead of hashing: cheaper, no allocation
/// beyond the keys themselves.
const SCAN_ALIGN_MAX: usize = 16;

/// The merge key of every element, or `None` when one lacks it or one is repeated.
pub(crate) fn element_keys<'a, N: Node<'a>>(
    key: MergeKey,
    items: impl Iterator<Item = N>,
) -> Option<Vec<Cow<'a, str>>> {
    let keys: Vec<Cow<'a, str>> = items
        .map(|item| element_key(key, item))
        .collect::<Option<_>>()?;
    let unique = if keys.len() <= SCAN_ALIGN_MAX {
        (1..keys.len()).all(|i| !keys[..i].contains(&keys[i]))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(keys.len());
        keys.iter().all(|k| seen.insert(k.as_ref()))
    };
    unique.then_some(keys)
}

fn align<'a, N: Node<'a>>(merge_key: Option<MergeKey>, old: &[N], new: &[N]) -> Alignment {
    if let Some(key) = merge_key
        && let (Some(old_keys), Some(new_keys)) = (
            element_keys(key, old.iter().copied()),
            element_keys(key, new.iter().copied()),
        )
    {
        return align_by_key(&old_keys, &new_keys);
    }
    let common = old.len().min(new.len());
    Alignment {
        kept: (0..common).map(|i| (i, i)).collect(),
        removed: (common..old.len()).collect(),
        added: (common..new.len()).collect(),
    }
}

fn align_by_key(old_keys: &[Cow<'_, str>], new_keys: &[Cow<'_, str>]) -> Alignment {
    let mut alignment = Alignment::default();
    if old_keys.len() <= SCAN_ALIGN_MAX && new_keys.len() <= SCAN_ALIGN_MAX {
        for (new_index, k) in new_keys.iter().enumerate() {
            match old_keys.iter().position(|o| o == k) {
                Some(old_index) => alignment.kept.push((old_index, new_index)),
                None => alignment.added.push(new_index),
            }
        }
        for (old_index, k) in old_keys.iter().enumerate() {
            if !new_keys.contains(k) {
                alignment.removed.push(old_index);
            }
        }
        return alignment;
    }
    let positions = |keys: &[Cow<'_, str>]| -> HashMap<String, usize> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.as_ref().to_owned(), i))
            .collect()
    };
    let (old_positions, new_positions) = (positions(old_keys), positions(new_keys));
    for (new_index, k) in new_keys.iter().enumerate() {
        match old_positions.get(k.as_ref()) {
            Some(&old_index) => alignment.kept.push((old_index, new_index)),
            None => alignment.added.push(new_index),
        }
    }
    for (old_index, k) in old_keys.iter().enumerate() {
        if !new_positions.contains_key(k.as_ref()) {
            alignment.removed.push(old_index);
        }
    }
    alignment
}
