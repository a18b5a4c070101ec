//! The state of `tail`, free of any terminal: the records of every stream merged by time,
//! deduplicated, the filters, the pause buffer, the selection, the view (list or top), and
//! what each key does.

use std::time::SystemTime;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::filters::Filters;
use super::record::{Dedupe, Record};
use super::stream::{ConnState, Event};

/// Records kept; older ones are dropped (and counted) past this.
pub(crate) const DEFAULT_CAPACITY: usize = 10_000;

/// One record as kept: where it came from and its place in time.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub record: Record,
    pub stream: usize,
    /// The record's time; records without one sort first.
    time: Option<SystemTime>,
    /// Arrival order, which breaks ties of time.
    seq: u64,
}

/// The order of records: by time, then by arrival.
type Key = (Option<SystemTime>, u64);

impl Entry {
    fn key(&self) -> Key {
        (self.time, self.seq)
    }
}

/// A filter being typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Text,
    Namespace,
    Rule,
}

impl Field {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Field::Text => "text",
            Field::Namespace => "namespace",
            Field::Rule => "rule",
        }
    }
}

/// What the body of the screen shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum View {
    /// The list of records and the selected one's detail.
    #[default]
    List,
    /// The rules, users, namespaces and denied fields of the shown records, ranked.
    Top,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Normal,
    /// Typing a filter, which applies as it is typed.
    Editing(Field),
}

/// One stream as the header shows it.
#[derive(Debug, Clone)]
pub(crate) struct StreamStatus {
    pub url: String,
    pub state: ConnState,
    pub received: usize,
}

#[derive(Debug)]
pub(crate) struct App {
    pub streams: Vec<StreamStatus>,
    /// Sorted by [`Entry::key`].
    records: Vec<Entry>,
    /// Arrived while paused, in arrival order.
    pending: Vec<Entry>,
    dedupe: Dedupe,
    next_seq: u64,
    capacity: usize,
    pub filters: Filters,
    pub paused: bool,
    pub mode: Mode,
    pub view: View,
    /// The selected record; `None` or `follow` select the newest shown.
    selected: Option<Key>,
    /// The selection stays on the newest record as records arrive.
    pub follow: bool,
    /// Lines that were not records.
    pub skipped: usize,
    /// Records dropped past the capacity.
    pub dropped: usize,
    pub quit: bool,
}

impl App {
    pub(crate) fn new(urls: Vec<String>, filters: Filters) -> Self {
        Self::with_capacity(urls, filters, DEFAULT_CAPACITY)
    }

    pub(crate) fn with_capacity(urls: Vec<String>, filters: Filters, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            streams: urls
                .into_iter()
                .map(|url| StreamStatus {
                    url,
                    state: ConnState::Connecting,
                    received: 0,
                })
                .collect(),
            records: Vec::new(),
            pending: Vec::new(),
            // Keys of dropped records stay known for a while, so that a reconnection that sends
            // them again does not bring them back.
            dedupe: Dedupe::new(capacity.saturating_mul(2)),
            next_seq: 0,
            capacity,
            filters,
            paused: false,
            mode: Mode::Normal,
            view: View::List,
            selected: None,
            follow: true,
            skipped: 0,
            dropped: 0,
            quit: false,
        }
    }

    pub(crate) fn on_event(&mut self, event: Event) {
        match event {
            Event::Record { stream, record, .. } => self.push(stream, *record),
            Event::Skipped { .. } => self.skipped += 1,
            Event::State { stream, state } => {
                if let Some(status) = self.streams.get_mut(stream) {
                    status.state = state;
                }
            }
            // The header names the pod followed now.
            Event::Moved { stream, to, .. } => {
                if let Some(status) = self.streams.get_mut(stream) {
                    status.url = to;
                }
            }
        }
    }

    /// A record from `stream`: dropped when already seen, buffered while paused, otherwise
    /// put in its place by time.
    pub(crate) fn push(&mut self, stream: usize, record: Record) {
        if !self.dedupe.first_time(&record) {
            return;
        }
        if let Some(status) = self.streams.get_mut(stream) {
            status.received += 1;
        }
        let entry = Entry {
            time: record.time(),
            record,
            stream,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        if self.paused {
            self.pending.push(entry);
        } else {
            self.insert(entry);
        }
    }

    fn insert(&mut self, entry: Entry) {
        let key = entry.key();
        let at = self.records.partition_point(|e| e.key() <= key);
        self.records.insert(at, entry);
        if self.records.len() > self.capacity {
            self.records.remove(0);
            self.dropped += 1;
        }
    }

    pub(crate) fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        if !paused {
            for entry in std::mem::take(&mut self.pending) {
                self.insert(entry);
            }
        }
    }

    /// Records waiting for resume.
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Records kept (shown or not).
    pub(crate) fn total(&self) -> usize {
        self.records.len()
    }

    /// The records the filters let through, oldest first.
    pub(crate) fn visible(&self) -> Vec<&Entry> {
        self.records
            .iter()
            .filter(|e| self.filters.matches(&e.record))
            .collect()
    }

    /// The position of the selection in `visible`: the newest when following, otherwise the
    /// selected record or, when the filters hide it, the nearest older one shown.
    pub(crate) fn selected_index(&self, visible: &[&Entry]) -> Option<usize> {
        if visible.is_empty() {
            return None;
        }
        match self.selected {
            Some(key) if !self.follow => Some(
                visible
                    .partition_point(|e| e.key() <= key)
                    .saturating_sub(1),
            ),
            _ => Some(visible.len() - 1),
        }
    }

    pub(crate) fn selected(&self) -> Option<&Entry> {
        let visible = self.visible();
        let index = self.selected_index(&visible)?;
        Some(visible[index])
    }

    /// Moves the selection by `delta` shown records; on the newest, it follows again.
    pub(crate) fn move_selection(&mut self, delta: isize) {
        let visible = self.visible();
        let Some(current) = self.selected_index(&visible) else {
            return;
        };
        let last = visible.len() - 1;
        let target = current.saturating_add_signed(delta).min(last);
        let key = visible[target].key();
        self.selected = Some(key);
        self.follow = target == last;
    }

    pub(crate) fn select_first(&mut self) {
        let visible = self.visible();
        if let Some(first) = visible.first() {
            let key = first.key();
            let follow = visible.len() == 1;
            self.selected = Some(key);
            self.follow = follow;
        }
    }

    pub(crate) fn select_last(&mut self) {
        self.follow = true;
        self.selected = None;
    }

    /// The text of a filter.
    pub(crate) fn value(&self, field: Field) -> &str {
        match field {
            Field::Text => &self.filters.text,
            Field::Namespace => self.filters.namespace.as_str(),
            Field::Rule => self.filters.rule.as_str(),
        }
    }

    /// Changes the text of a filter.
    fn change(&mut self, field: Field, change: impl FnOnce(&mut String)) {
        match field {
            Field::Text => change(&mut self.filters.text),
            Field::Namespace => self.filters.namespace.edit(change),
            Field::Rule => self.filters.rule.edit(change),
        }
    }

    /// Starts typing a filter. An empty namespace or rule filter starts from the selected
    /// record's, so that `n` Enter shows that namespace.
    fn edit(&mut self, field: Field) {
        let suggestion = match (field, self.selected()) {
            (Field::Namespace, Some(e)) => e.record.resource_namespace.to_string(),
            (Field::Rule, Some(e)) => e.record.rule(),
            _ => String::new(),
        };
        if self.value(field).is_empty() {
            self.change(field, |value| *value = suggestion);
        }
        self.mode = Mode::Editing(field);
    }

    pub(crate) fn on_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c' | 'C')) {
            self.quit = true;
            return;
        }
        match self.mode {
            Mode::Editing(field) => match key.code {
                KeyCode::Enter => self.mode = Mode::Normal,
                KeyCode::Esc => {
                    self.change(field, String::clear);
                    self.mode = Mode::Normal;
                }
                KeyCode::Backspace => self.change(field, |v| {
                    v.pop();
                }),
                KeyCode::Char('u' | 'U') if ctrl => self.change(field, String::clear),
                KeyCode::Char(c) if !ctrl => self.change(field, |v| v.push(c)),
                _ => {}
            },
            Mode::Normal => match key.code {
                KeyCode::Char('q') => self.quit = true,
                KeyCode::Esc => {
                    if self.filters.text.is_empty() {
                        self.quit = true;
                    } else {
                        self.filters.text.clear();
                    }
                }
                KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
                KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
                KeyCode::PageUp => self.move_selection(-10),
                KeyCode::PageDown => self.move_selection(10),
                KeyCode::Home | KeyCode::Char('g') => self.select_first(),
                KeyCode::End | KeyCode::Char('G') => self.select_last(),
                KeyCode::Char('p' | ' ') => self.set_paused(!self.paused),
                KeyCode::Char('/') => self.edit(Field::Text),
                KeyCode::Char('n') => self.edit(Field::Namespace),
                KeyCode::Char('r') => self.edit(Field::Rule),
                KeyCode::Char('s') => self.filters.source = self.filters.source.next(),
                KeyCode::Char('c') => self.filters = Filters::default(),
                KeyCode::Char('t') => {
                    self.view = match self.view {
                        View::List => View::Top,
                        View::Top => View::List,
                    }
                }
                _ => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tail::filters::SourceFilter;
    use crate::tail::record::Source;

    pub(crate) fn record(id: &str, time: &str, namespace: &str, rule: &str) -> Record {
        Record {
            event_type: drift_api::violation::ADMISSION_EVENT.into(),
            id: id.to_owned().into(),
            timestamp: time.to_owned().into(),
            resource_kind: "Deployment".into(),
            resource_namespace: namespace.to_owned().into(),
            resource_name: format!("obj-{id}").into(),
            rule_name: rule.to_owned().into(),
            rule_namespace: "drift-sentinel".into(),
            request: Some(drift_api::violation::RequestFields {
                user_name: "alice".into(),
                ..Default::default()
            }),
            details: drift_api::violation::Details {
                denied_paths: vec![format!("spec.path{id}").into()],
                ..Default::default()
            },
            ..Record::default()
        }
    }

    fn t(seconds: u32) -> String {
        format!("2027-01-15T08:00:{seconds:02}Z")
    }

    fn ids(app: &App) -> Vec<String> {
        app.visible()
            .iter()
            .map(|e| e.record.id.to_string())
            .collect()
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn type_text(app: &mut App, text: &str) {
        for c in text.chars() {
            app.on_key(key(KeyCode::Char(c)));
        }
    }

    fn app() -> App {
        App::new(
            vec!["http://a".into(), "http://b".into()],
            Filters::default(),
        )
    }

    #[test]
    fn streams_merge_by_time_then_arrival() {
        let mut app = app();
        app.push(0, record("a3", &t(3), "ns", "r"));
        app.push(1, record("b1", &t(1), "ns", "r"));
        app.push(0, record("a5", &t(5), "ns", "r"));
        app.push(1, record("b3", &t(3), "ns", "r"));
        app.push(1, record("x", "not a time", "ns", "r"));
        assert_eq!(ids(&app), ["x", "b1", "a3", "b3", "a5"]);
        assert_eq!(app.streams[0].received, 2);
        assert_eq!(app.streams[1].received, 3);
    }

    #[test]
    fn records_seen_again_are_dropped() {
        let mut app = app();
        app.push(0, record("a", &t(1), "ns", "r"));
        // The same record again after a reconnection, and from the other stream.
        app.push(0, record("a", &t(1), "ns", "r"));
        app.push(1, record("a", &t(1), "ns", "r"));
        // The same request judged again later is another record.
        app.push(0, record("a", &t(2), "ns", "r"));
        assert_eq!(ids(&app), ["a", "a"]);
        assert_eq!(app.total(), 2);
    }

    #[test]
    fn capacity_drops_the_oldest() {
        let mut app = App::with_capacity(vec!["u".into()], Filters::default(), 2);
        for i in 1..=3 {
            app.push(0, record(&format!("r{i}"), &t(i), "ns", "r"));
        }
        assert_eq!(ids(&app), ["r2", "r3"]);
        assert_eq!(app.dropped, 1);
        // Still known: not brought back by a repeat.
        app.push(0, record("r1", &t(1), "ns", "r"));
        assert_eq!(ids(&app), ["r2", "r3"]);
    }

    #[test]
    fn pause_buffers_and_resume_merges() {
        let mut app = app();
        app.push(0, record("a", &t(2), "ns", "r"));
        app.on_key(key(KeyCode::Char('p')));
        assert!(app.paused);
        app.push(0, record("b", &t(3), "ns", "r"));
        app.push(1, record("c", &t(1), "ns", "r"));
        app.push(1, record("c", &t(1), "ns", "r"));
        assert_eq!(ids(&app), ["a"]);
        assert_eq!(app.pending(), 2);
        app.on_key(key(KeyCode::Char('p')));
        assert!(!app.paused);
        assert_eq!(app.pending(), 0);
        assert_eq!(ids(&app), ["c", "a", "b"]);
    }

    #[test]
    fn filters_by_namespace_rule_source_and_text() {
        let mut app = app();
        app.push(0, record("1", &t(1), "prod-eu", "strict"));
        app.push(0, record("2", &t(2), "prod-us", "loose"));
        let mut audited = record("3", &t(3), "dev", "strict");
        audited.event_type = drift_api::violation::AUDIT_EVENT.into();
        if let Some(request) = audited.request.as_mut() {
            request.user_name = "Bob".into();
        }
        app.push(0, audited);

        app.filters.namespace = "prod-eu".into();
        assert_eq!(ids(&app), ["1"]);
        app.filters.namespace = "prod-*".into();
        assert_eq!(ids(&app), ["1", "2"]);
        app.filters.namespace.clear();

        app.filters.rule = "strict".into();
        assert_eq!(ids(&app), ["1", "3"]);
        app.filters.rule = "drift-sentinel/loose".into();
        assert_eq!(ids(&app), ["2"]);
        app.filters.rule.clear();

        app.on_key(key(KeyCode::Char('s')));
        assert_eq!(app.filters.source, SourceFilter::Only(Source::Webhook));
        assert_eq!(ids(&app), ["1", "2"]);
        app.on_key(key(KeyCode::Char('s')));
        assert_eq!(ids(&app), ["3"]);
        app.on_key(key(KeyCode::Char('s')));
        assert_eq!(app.filters.source, SourceFilter::All);

        for (text, expected) in [
            ("bob", vec!["3"]),
            ("SPEC.PATH2", vec!["2"]),
            ("obj-1", vec!["1"]),
            ("prod-us/", vec!["2"]),
            ("drift-sentinel/strict", vec!["1", "3"]),
            ("deployment", vec!["1", "2", "3"]),
            ("nomatch", vec![]),
        ] {
            app.filters.text = text.into();
            assert_eq!(ids(&app), expected, "text {text:?}");
        }
        assert_eq!(app.filters.describe(), "text=\"nomatch\"");
    }

    #[test]
    fn namespace_and_rule_filters_are_the_engine_s_globs() {
        let mut app = app();
        for (id, namespace) in [("1", "prod-1"), ("2", "prod-eu"), ("3", "prod-*")] {
            app.push(0, record(id, &t(id.parse().unwrap()), namespace, "strict"));
        }
        // `?` is one character, also a `*`.
        app.filters.namespace = "prod-?".into();
        assert_eq!(ids(&app), ["1", "3"]);
        app.filters.namespace = "prod-[!0-9]*".into();
        assert_eq!(ids(&app), ["2", "3"]);
        // Not a glob (yet, while typing): the text itself.
        app.filters.namespace = "prod-[".into();
        assert!(ids(&app).is_empty());
        app.filters.namespace = "prod-\\*".into();
        assert_eq!(ids(&app), ["3"]);
        app.filters.namespace.clear();
        app.filters.rule = "str?ct".into();
        assert_eq!(ids(&app).len(), 3);
    }

    #[test]
    fn t_switches_between_the_list_and_the_top_view() {
        let mut app = app();
        assert_eq!(app.view, View::List);
        app.on_key(key(KeyCode::Char('t')));
        assert_eq!(app.view, View::Top);
        app.on_key(key(KeyCode::Char('t')));
        assert_eq!(app.view, View::List);
    }

    #[test]
    fn text_filter_typed_applied_and_cleared() {
        let mut app = app();
        app.push(0, record("1", &t(1), "prod-eu", "strict"));
        app.on_key(key(KeyCode::Char('/')));
        assert_eq!(app.mode, Mode::Editing(Field::Text));
        type_text(&mut app, "nomatchx");
        app.on_key(key(KeyCode::Backspace));
        assert_eq!(app.filters.text, "nomatch");
        // Applies as it is typed.
        assert!(ids(&app).is_empty());
        app.on_key(key(KeyCode::Enter));
        assert_eq!(app.mode, Mode::Normal);
        assert!(ids(&app).is_empty());
        // Esc clears the text filter first, and quits only then.
        app.on_key(key(KeyCode::Esc));
        assert!(!app.quit);
        assert_eq!(ids(&app), ["1"]);
        app.on_key(key(KeyCode::Esc));
        assert!(app.quit);
    }

    #[test]
    fn esc_while_typing_clears_that_filter_and_q_is_text_there() {
        let mut app = app();
        app.filters.rule = "strict".into();
        app.on_key(key(KeyCode::Char('r')));
        assert_eq!(app.filters.rule, "strict");
        type_text(&mut app, "q");
        assert!(!app.quit);
        assert_eq!(app.filters.rule, "strictq");
        app.on_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
        assert_eq!(app.filters.rule, "");
        type_text(&mut app, "x");
        app.on_key(key(KeyCode::Esc));
        assert_eq!(app.filters.rule, "");
        assert_eq!(app.mode, Mode::Normal);
    }

    #[test]
    fn namespace_filter_starts_from_the_selected_record() {
        let mut app = app();
        app.push(0, record("1", &t(1), "prod-eu", "strict"));
        app.push(0, record("2", &t(2), "prod-us", "strict"));
        app.on_key(key(KeyCode::Up));
        app.on_key(key(KeyCode::Char('n')));
        assert_eq!(app.filters.namespace, "prod-eu");
        app.on_key(key(KeyCode::Enter));
        assert_eq!(ids(&app), ["1"]);
        app.on_key(key(KeyCode::Char('c')));
        assert!(app.filters.is_empty());
    }

    #[test]
    fn ctrl_c_quits_in_any_mode() {
        let mut app = app();
        app.on_key(key(KeyCode::Char('/')));
        app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
        assert!(app.quit);
        let mut app = self::app();
        app.on_key(key(KeyCode::Char('q')));
        assert!(app.quit);
    }

    #[test]
    fn selection_follows_the_newest_until_moved() {
        let mut app = app();
        assert!(app.selected().is_none());
        app.push(0, record("1", &t(1), "ns", "r"));
        app.push(0, record("2", &t(2), "ns", "r"));
        assert_eq!(app.selected().unwrap().record.id, "2");
        app.push(0, record("3", &t(3), "ns", "r"));
        assert_eq!(app.selected().unwrap().record.id, "3");
        // Moved up: stays there as records arrive, also older ones inserted before it.
        app.on_key(key(KeyCode::Char('k')));
        assert!(!app.follow);
        app.push(0, record("4", &t(4), "ns", "r"));
        app.push(0, record("0", &t(0), "ns", "r"));
        assert_eq!(app.selected().unwrap().record.id, "2");
        app.on_key(key(KeyCode::Home));
        assert_eq!(app.selected().unwrap().record.id, "0");
        app.on_key(key(KeyCode::Up));
        assert_eq!(app.selected().unwrap().record.id, "0");
        app.on_key(key(KeyCode::PageDown));
        assert_eq!(app.selected().unwrap().record.id, "4");
        // Back on the newest: follows again.
        assert!(app.follow);
        app.push(0, record("5", &t(5), "ns", "r"));
        assert_eq!(app.selected().unwrap().record.id, "5");
        app.on_key(key(KeyCode::Char('j')));
        assert_eq!(app.selected().unwrap().record.id, "5");
        app.on_key(key(KeyCode::Char('k')));
        app.on_key(key(KeyCode::End));
        assert!(app.follow);
        assert_eq!(app.selected().unwrap().record.id, "5");
    }

    #[test]
    fn a_hidden_selection_falls_back_to_the_nearest_older_shown() {
        let mut app = app();
        app.push(0, record("1", &t(1), "a", "r"));
        app.push(0, record("2", &t(2), "b", "r"));
        app.push(0, record("3", &t(3), "a", "r"));
        app.on_key(key(KeyCode::Up));
        assert_eq!(app.selected().unwrap().record.id, "2");
        app.filters.namespace = "a".into();
        assert_eq!(app.selected().unwrap().record.id, "1");
        app.filters.namespace.clear();
        assert_eq!(app.selected().unwrap().record.id, "2");
    }

    #[test]
    fn connection_states_by_stream() {
        let mut app = app();
        app.on_event(Event::State {
            stream: 1,
            state: ConnState::Connected,
        });
        app.on_event(Event::Skipped { stream: 0 });
        app.on_event(Event::Record {
            stream: 1,
            line: String::new(),
            record: Box::new(record("1", &t(1), "a", "r")),
        });
        assert_eq!(app.streams[0].state, ConnState::Connecting);
        assert_eq!(app.streams[1].state, ConnState::Connected);
        assert_eq!(app.skipped, 1);
        assert_eq!(app.total(), 1);
    }
}
