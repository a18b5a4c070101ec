//! Drawing `tail`: a header (sources, connection states, counts, filters), the picture
//! (violations per minute over the last hour, by source: [`picture`]), then the list of records
//! (newest at the bottom) with a detail pane of the selected record — or, key `t`, the top
//! view — and a footer with the keys or the filter being typed. A function of the [`App`] and
//! the time alone, plus where the list is scrolled.

mod picture;

use std::time::SystemTime;

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, HighlightSpacing, Paragraph, Row, Table, TableState, Wrap};

use super::app::{App, Entry, Mode, View};
use super::record::{Record, value_text};
use super::stream::ConnState;

/// Where the list is scrolled: kept between frames so the view moves only when the selection
/// leaves it.
#[derive(Debug, Default)]
pub(crate) struct ListView {
    offset: usize,
}

impl ListView {
    /// The first row shown so that `selected` is within `height` rows of `len`.
    fn scroll(&mut self, selected: Option<usize>, len: usize, height: usize) -> usize {
        let height = height.max(1);
        if let Some(selected) = selected {
            if selected < self.offset {
                self.offset = selected;
            } else if selected >= self.offset + height {
                self.offset = selected + 1 - height;
            }
        }
        self.offset = self.offset.min(len.saturating_sub(height));
        self.offset
    }
}

const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);
const DIM: Style = Style::new().add_modifier(Modifier::DIM);

/// Draws the whole screen as of `now`; without `colour`, in the terminal's own colours only
/// (bold, dim and reverse stay).
pub(crate) fn draw(
    frame: &mut Frame,
    app: &App,
    view: &mut ListView,
    now: SystemTime,
    colour: bool,
) {
    let [header, rates, body, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(2),
        Constraint::Min(6),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let visible = app.visible();
    frame.render_widget(Paragraph::new(header_lines(app, visible.len())), header);
    picture::draw_rates(frame, rates, &visible, now);
    match app.view {
        View::List => draw_body(frame, body, app, &visible, view),
        View::Top => picture::draw_top(frame, body, &visible),
    }
    draw_footer(frame, footer, app);
    if !colour {
        monochrome(frame.buffer_mut());
    }
}

/// Leaves the terminal's default colours everywhere.
fn monochrome(buffer: &mut Buffer) {
    for cell in buffer.content.iter_mut() {
        cell.set_fg(Color::Reset);
        cell.set_bg(Color::Reset);
    }
}

/// The list and the detail pane of the selected record.
fn draw_body(frame: &mut Frame, area: Rect, app: &App, visible: &[&Entry], view: &mut ListView) {
    let [list, detail] =
        Layout::vertical([Constraint::Min(5), Constraint::Percentage(55)]).areas(area);
    let selected = app.selected_index(visible);
    draw_list(frame, list, visible, selected, view);
    let detail_block = Block::bordered().title(" Detail ");
    let detail_text = match selected {
        Some(i) => detail_lines(visible[i], app),
        None => vec![Line::styled(
            if app.total() == 0 {
                "No violation yet. Records appear here as the agents export them."
            } else {
                "No record matches the filters (c clears them)."
            },
            DIM,
        )],
    };
    frame.render_widget(
        Paragraph::new(detail_text)
            .block(detail_block)
            .wrap(Wrap { trim: false }),
        detail,
    );
}

fn state_style(state: &ConnState) -> Style {
    match state {
        ConnState::Connected => Style::new().fg(Color::Green),
        ConnState::Connecting | ConnState::Reconnecting { .. } => Style::new().fg(Color::Yellow),
        ConnState::Failed(_) => Style::new().fg(Color::Red),
    }
}

fn header_lines(app: &App, shown: usize) -> Vec<Line<'static>> {
    let mut sources = vec![Span::styled("Drift Sentinel violations", BOLD)];
    for stream in &app.streams {
        sources.push(Span::raw(" · "));
        sources.push(Span::raw(stream.url.clone()));
        sources.push(Span::raw(" "));
        sources.push(Span::styled(
            stream.state.to_string(),
            state_style(&stream.state),
        ));
    }
    let mut counts = vec![Span::raw(format!("{shown} shown of {} kept", app.total()))];
    if app.paused {
        counts.push(Span::raw(" · "));
        counts.push(Span::styled(
            format!("PAUSED ({} new)", app.pending()),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    } else if app.follow {
        counts.push(Span::raw(" · following"));
    }
    if !app.filters.is_empty() {
        counts.push(Span::raw(" · filters: "));
        counts.push(Span::styled(app.filters.describe(), BOLD));
    }
    if app.skipped > 0 {
        counts.push(Span::raw(format!(
            " · {} line(s) that are not records skipped",
            app.skipped
        )));
    }
    if app.dropped > 0 {
        counts.push(Span::raw(format!(" · {} oldest dropped", app.dropped)));
    }
    vec![Line::from(sources), Line::from(counts)]
}

/// `01-15 08:00:00` (UTC) of a record, or its timestamp as it is when it is not RFC 3339.
pub(crate) fn short_time(record: &Record) -> String {
    match record.time() {
        Some(time) => {
            let text = humantime::format_rfc3339_seconds(time).to_string();
            format!("{} {}", &text[5..10], &text[11..19])
        }
        None => record.timestamp.chars().take(14).collect(),
    }
}

fn action_style(action: &str) -> Style {
    match action {
        "deny" => Style::new().fg(Color::Red),
        "warn" => Style::new().fg(Color::Yellow),
        "dryrun" => Style::new().fg(Color::Cyan),
        // An edit a bypass allowed: what a forgotten exception lets through.
        "bypass" => Style::new().fg(Color::Magenta),
        _ => Style::new(),
    }
}

/// The cells of one list row: time, object, kind, rule, action, first denied path (for an
/// edit a bypass allowed: the bypass and its end).
pub(crate) fn row_cells(record: &Record) -> [String; 6] {
    let paths = &record.details.denied_paths;
    let denied = match (&record.bypass, paths.len()) {
        (Some(bypass), _) => match &bypass.end {
            Some(end) => format!("bypass until {end}"),
            None => "bypass without an end".to_owned(),
        },
        (None, 0) => String::new(),
        (None, 1) => paths[0].to_string(),
        (None, n) => format!("{} (+{})", paths[0], n - 1),
    };
    [
        short_time(record),
        record.object(),
        record.resource_kind.to_string(),
        record.rule(),
        record.enforcement_action.to_string(),
        denied,
    ]
}

fn draw_list(
    frame: &mut Frame,
    area: Rect,
    visible: &[&Entry],
    selected: Option<usize>,
    view: &mut ListView,
) {
    let block = Block::bordered().title(" Violations (newest at the bottom) ");
    // Border (2) and column header (1).
    let height = usize::from(area.height.saturating_sub(3));
    let offset = view.scroll(selected, visible.len(), height);
    let window: Vec<[String; 6]> = visible
        .iter()
        .skip(offset)
        .take(height.max(1))
        .map(|entry| row_cells(&entry.record))
        .collect();
    // The object and rule columns as wide as what they show (within bounds); the denied path
    // takes the rest.
    let width = |column: usize, title: &str| {
        window
            .iter()
            .map(|cells| Span::raw(cells[column].as_str()).width())
            .chain([title.len()])
            .max()
            .unwrap_or_default()
            .min(48) as u16
    };
    let widths = column_widths(
        area.width,
        [
            width(1, "OBJECT"),
            width(2, "KIND"),
            width(3, "RULE"),
            width(5, "DENIED"),
        ],
    );
    let rows = window.into_iter().map(|cells| {
        let action = action_style(&cells[4]);
        Row::new(cells.into_iter().enumerate().map(|(i, text)| {
            if i == 4 {
                Cell::from(text).style(action)
            } else {
                Cell::from(text)
            }
        }))
    });
    let header = Row::new(["TIME (UTC)", "OBJECT", "KIND", "RULE", "ACTION", "DENIED"]).style(BOLD);
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .column_spacing(COLUMN_SPACING)
        .highlight_spacing(HighlightSpacing::Always)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("› ");
    let mut state = TableState::default().with_selected(selected.map(|s| s - offset));
    frame.render_stateful_widget(table, area, &mut state);
}

/// Spacing between the list's columns.
const COLUMN_SPACING: u16 = 2;

/// The list's columns for a list `width` wide, given what the object, kind, rule and denied
/// columns show: each as wide as its content when all fit; otherwise the widest are cut first,
/// down to the same width, so that every column keeps a useful part.
fn column_widths(width: u16, content: [u16; 4]) -> [Constraint; 6] {
    // Borders, highlight symbol, spacing, time and action.
    let fixed = 2 + 2 + 5 * COLUMN_SPACING + 14 + 6;
    let room = width.saturating_sub(fixed);
    let mut widths = content;
    while widths.iter().sum::<u16>() > room {
        let widest = (0..widths.len())
            .max_by_key(|&i| (widths[i], i))
            .unwrap_or_default();
        if widths[widest] <= 1 {
            break;
        }
        widths[widest] -= 1;
    }
    let [object, kind, rule, _] = widths;
    [
        Constraint::Length(14),
        Constraint::Length(object),
        Constraint::Length(kind),
        Constraint::Length(rule),
        Constraint::Length(6),
        // The denied path takes what is left.
        Constraint::Fill(1),
    ]
}

fn field(name: &str, value: impl Into<String>) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{name:<9}"), BOLD),
        Span::raw(value.into()),
    ])
}

/// The detail pane of one record.
fn detail_lines(entry: &Entry, app: &App) -> Vec<Line<'static>> {
    let r = &entry.record;
    let mut kind = vec![r.resource_api_version.to_string(), r.resource.to_string()];
    if !r.sub_resource.is_empty() {
        kind[1] = format!("{}/{}", r.resource, r.sub_resource);
    }
    kind.retain(|s| !s.is_empty());
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{} {}", r.resource_kind, r.object()), BOLD),
        Span::styled(format!("  ({})", kind.join(", ")), DIM),
    ])];
    match &r.request {
        Some(request) => {
            let mut time = format!("{}  {}", r.timestamp, request.operation);
            if request.dry_run {
                time.push_str("  (dry run)");
            }
            lines.push(field("Time", time));
            let user = if request.user_uid.is_empty() {
                request.user_name.to_string()
            } else {
                format!("{} (uid {})", request.user_name, request.user_uid)
            };
            lines.push(field("User", user));
            if !request.user_groups.is_empty() {
                lines.push(field("Groups", request.user_groups.join(", ")));
            }
        }
        None => lines.push(field("Time", r.timestamp.to_string())),
    }
    lines.push(field("Rule", r.rule()));
    lines.push(Line::from(vec![
        Span::styled(format!("{:<9}", "Mode"), BOLD),
        Span::raw(format!("{} → ", r.mode)),
        Span::styled(
            r.enforcement_action.to_string(),
            action_style(&r.enforcement_action),
        ),
    ]));
    if let Some(bypass) = &r.bypass {
        let end = bypass
            .end
            .as_deref()
            .map_or("without an end".to_owned(), |end| format!("until {end}"));
        lines.push(field(
            "Bypass",
            format!("{} {end} ({})", bypass.value, bypass.end_state),
        ));
        lines.push(field("Message", r.message.to_string()));
    }
    let denied = &r.details.denied_paths;
    lines.push(Line::styled(
        format!("Denied paths ({})", denied.len()),
        BOLD,
    ));
    for path in denied {
        let mut spans = vec![
            Span::raw("  "),
            Span::styled(path.to_string(), Style::new().fg(Color::Red)),
        ];
        if let Some(change) = r.change(path) {
            spans.push(Span::raw(format!(
                ": {} → {}",
                value_text(change.old.as_deref()),
                value_text(change.new.as_deref())
            )));
        }
        lines.push(Line::from(spans));
    }
    let allowed: Vec<&str> = r
        .details
        .changed_paths
        .iter()
        .filter(|p| !denied.contains(p))
        .map(|p| p.as_ref())
        .collect();
    if !allowed.is_empty() {
        lines.push(field("Allowed", allowed.join(", ")));
    }
    let source = r.source().map_or(r.event_type.as_ref(), |s| s.as_str());
    let from = app
        .streams
        .get(entry.stream)
        .map(|s| format!(", from {}", s.url))
        .unwrap_or_default();
    lines.push(field("Source", format!("{source}{from}  id {}", r.id)));
    if !r.message.is_empty() {
        lines.push(field("Message", r.message.clone()));
    }
    lines
}

fn draw_footer(frame: &mut Frame, area: Rect, app: &App) {
    match app.mode {
        Mode::Editing(field) => {
            let value = app.value(field);
            let prompt = format!("{} filter: ", field.label());
            let line = Line::from(vec![
                Span::styled(prompt.clone(), BOLD),
                Span::raw(value.to_owned()),
                Span::styled("   Enter apply · Esc clear · Ctrl-U erase", DIM),
            ]);
            frame.render_widget(Paragraph::new(line), area);
            let x = area.x + (prompt.chars().count() + value.chars().count()) as u16;
            frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
        }
        Mode::Normal => {
            let pause = if app.paused { "resume" } else { "pause" };
            frame.render_widget(
                Paragraph::new(Line::styled(
                    format!(
                        "q quit · ↑↓/jk select · p {pause} · t {} · / text · n namespace · r rule · s source ({}) · c clear · g/G first/last",
                        match app.view {
                            View::List => "top",
                            View::Top => "list",
                        },
                        app.filters.source.as_str()
                    ),
                    DIM,
                )),
                area,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tail::app::Field;
    use crate::tail::filters::Filters;
    use crate::tail::record::Record;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    const LINE: &str = r#"{"eventType":"violation_admission","id":"uid-1","timestamp":"2027-01-15T08:00:00.000001Z","operation":"UPDATE","dryRun":false,"userName":"alice","userUID":"u1","userGroups":["dev"],"resource":"deployments","subResource":"","resourceAPIVersion":"apps/v1","resourceKind":"Deployment","resourceNamespace":"prod-eu","resourceName":"checkout","ruleName":"strict","ruleNamespace":"drift-sentinel","mode":"enforce","enforcementAction":"deny","message":"denied","details":{"deniedPaths":["spec.replicas","spec.template.spec.containers[0].image"],"changedPaths":["metadata.labels.team","spec.replicas","spec.template.spec.containers[0].image"],"changes":[{"path":"spec.replicas","old":"3","new":"5"},{"path":"spec.template.spec.containers[0].image","old":"\"nginx:1.25\"","new":"\"nginx:1.26\""}]}}"#;

    fn screen(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        let mut view = ListView::default();
        let now = humantime::parse_rfc3339("2027-01-15T08:00:30Z").unwrap();
        terminal
            .draw(|f| draw(f, app, &mut view, now, true))
            .unwrap();
        let buffer = terminal.backend().buffer().clone();
        let mut text = String::new();
        for y in 0..buffer.area.height {
            for x in 0..buffer.area.width {
                text.push_str(buffer[(x, y)].symbol());
            }
            text.push('\n');
        }
        text
    }

    #[test]
    fn without_colour_only_the_terminal_s_own_colours_are_used() {
        let mut app = App::new(vec!["http://127.0.0.1:9090".into()], Filters::default());
        app.push(0, Record::parse(LINE).unwrap());
        let colours = |colour: bool| {
            let mut terminal = Terminal::new(TestBackend::new(160, 40)).unwrap();
            let now = humantime::parse_rfc3339("2027-01-15T08:00:30Z").unwrap();
            terminal
                .draw(|f| draw(f, &app, &mut ListView::default(), now, colour))
                .unwrap();
            let buffer = terminal.backend().buffer().clone();
            buffer
                .content
                .iter()
                .filter(|c| c.fg != Color::Reset || c.bg != Color::Reset)
                .count()
        };
        assert!(colours(true) > 0);
        assert_eq!(colours(false), 0);
    }

    #[test]
    fn a_record_in_the_list_and_the_detail_pane() {
        let mut app = App::new(vec!["http://127.0.0.1:9090".into()], Filters::default());
        app.on_event(super::super::stream::Event::State {
            stream: 0,
            state: ConnState::Connected,
        });
        app.push(0, Record::parse(LINE).unwrap());
        let text = screen(&app, 160, 40);
        for expected in [
            "http://127.0.0.1:9090 connected",
            "1 shown of 1 kept · following",
            "01-15 08:00:00",
            "prod-eu/checkout",
            "drift-sentinel/strict",
            "deny",
            "spec.replicas (+1)",
            "Deployment prod-eu/checkout  (apps/v1, deployments)",
            "alice (uid u1)",
            "enforce → deny",
            "spec.replicas: 3 → 5",
            "spec.template.spec.containers[0].image: \"nginx:1.25\" → \"nginx:1.26\"",
            "Allowed  metadata.labels.team",
            "q quit",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn empty_paused_filtered_and_editing() {
        let mut app = App::new(
            vec!["http://a".into(), "http://b".into()],
            Filters::default(),
        );
        app.on_event(super::super::stream::Event::State {
            stream: 1,
            state: ConnState::Reconnecting {
                after: std::time::Duration::from_secs(1),
                reason: "Connection refused".into(),
            },
        });
        let text = screen(&app, 160, 30);
        assert!(text.contains("No violation yet"), "{text}");
        assert!(text.contains("http://a connecting"), "{text}");
        assert!(
            text.contains("http://b reconnecting in 1s: Connection refused"),
            "{text}"
        );

        app.push(0, Record::parse(LINE).unwrap());
        app.set_paused(true);
        let mut second = Record::parse(LINE).unwrap();
        second.id = "uid-2".into();
        app.push(0, second);
        let text = screen(&app, 160, 30);
        assert!(text.contains("PAUSED (1 new)"), "{text}");
        assert!(text.contains("p resume"), "{text}");

        app.filters.text = "nomatch".into();
        app.mode = Mode::Editing(Field::Text);
        let text = screen(&app, 160, 30);
        assert!(text.contains("No record matches the filters"), "{text}");
        assert!(!text.contains("prod-eu/checkout"), "{text}");
        assert!(text.contains("filters: text=\"nomatch\""), "{text}");
        assert!(text.contains("text filter: nomatch"), "{text}");
    }

    #[test]
    fn columns_fit_their_content_or_shrink_in_proportion() {
        let wide = column_widths(200, [16, 10, 36, 30]);
        assert_eq!(wide[1..4], [16, 10, 36].map(Constraint::Length));
        assert_eq!(wide[5], Constraint::Fill(1));
        // 66 columns of room for 92: the rule is cut first, then rule and denied alike.
        let narrow = column_widths(100, [16, 10, 36, 30]);
        assert_eq!(narrow[1..4], [16, 10, 20].map(Constraint::Length));
        let tiny = column_widths(40, [16, 10, 36, 30]);
        assert_eq!(tiny[1..4], [2, 2, 1].map(Constraint::Length));
    }

    #[test]
    fn a_narrow_terminal_still_shows_the_denied_path() {
        let mut app = App::new(vec!["http://127.0.0.1:9090".into()], Filters::default());
        app.push(0, Record::parse(LINE).unwrap());
        let text = screen(&app, 100, 24);
        let row = text
            .lines()
            .find(|l| l.contains("01-15 08:00:00"))
            .unwrap_or_else(|| panic!("no row in\n{text}"));
        assert!(row.contains("spec.replic"), "{row}");
        assert!(row.contains("prod-eu/che"), "{row}");
        assert!(text.contains("q quit"), "{text}");
    }

    #[test]
    fn the_list_scrolls_only_when_the_selection_leaves_it() {
        let mut view = ListView::default();
        assert_eq!(view.scroll(Some(9), 10, 4), 6);
        assert_eq!(view.scroll(Some(7), 10, 4), 6);
        assert_eq!(view.scroll(Some(3), 10, 4), 3);
        assert_eq!(view.scroll(Some(5), 10, 4), 3);
        assert_eq!(view.scroll(None, 2, 4), 0);
    }

    #[test]
    fn row_of_a_record_without_time() {
        let record = Record {
            timestamp: "garbage-time-text".into(),
            resource_name: "cluster-thing".into(),
            ..Record::default()
        };
        let cells = row_cells(&record);
        assert_eq!(cells[0], "garbage-time-t");
        assert_eq!(cells[1], "cluster-thing");
        assert_eq!(cells[5], "");
    }
}
