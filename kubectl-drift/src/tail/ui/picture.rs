//! The picture of the records shown: a sparkline per source of the violations per minute over
//! the last hour, and the top view ranking rules, users, namespaces and denied fields.

use std::time::SystemTime;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Sparkline, Table};

use crate::tail::app::Entry;
use crate::tail::stats::{MINUTES, PerMinute, Ranked, Top};

const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);
const DIM: Style = Style::new().add_modifier(Modifier::DIM);

/// One row per source: its name, a sparkline of the last hour (a column a minute, the current
/// minute at the right) and the numbers.
pub(super) fn draw_rates(frame: &mut Frame, area: Rect, visible: &[&Entry], now: SystemTime) {
    let counts = PerMinute::of(visible.iter().map(|e| &e.record), now);
    let rows = Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).split(area);
    let sources = [
        ("webhook", &counts.webhook, Color::Red),
        ("audit", &counts.audit, Color::Magenta),
    ];
    for (row, (name, data, colour)) in rows.iter().zip(sources) {
        let [label, spark, summary] = Layout::horizontal([
            Constraint::Length(9),
            Constraint::Length(MINUTES as u16),
            Constraint::Fill(1),
        ])
        .areas(*row);
        // A narrow terminal shows the latest minutes.
        let shown = &data[MINUTES - usize::from(spark.width).min(MINUTES)..];
        let total: u64 = data.iter().sum();
        let max = data.iter().copied().max().unwrap_or_default();
        frame.render_widget(
            Paragraph::new(Span::styled(format!("{name:<8}"), BOLD)),
            label,
        );
        // A minute without violations is a dot on the baseline.
        let bars: Vec<Option<u64>> = shown.iter().map(|&n| (n > 0).then_some(n)).collect();
        frame.render_widget(
            Sparkline::default()
                .data(bars)
                .max(max.max(1))
                .style(Style::new().fg(colour))
                .absent_value_symbol("·")
                .absent_value_style(DIM),
            spark,
        );
        let text = if total == 0 {
            " none in the last hour".to_owned()
        } else {
            format!(
                " {total} in the last hour · max {max}/min · {} now",
                data[MINUTES - 1]
            )
        };
        frame.render_widget(Paragraph::new(Line::styled(text, DIM)), summary);
    }
}

/// The rules, users, namespaces and denied fields of the records shown, most named first.
pub(super) fn draw_top(frame: &mut Frame, area: Rect, visible: &[&Entry]) {
    let block = Block::bordered().title(format!(
        " Top of the {} shown record{} (t: back to the list) ",
        visible.len(),
        if visible.len() == 1 { "" } else { "s" }
    ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if visible.is_empty() {
        frame.render_widget(
            Paragraph::new(Line::styled("No record shown (c clears the filters).", DIM)),
            inner,
        );
        return;
    }
    let [upper, lower] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(inner);
    let [rules, users] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(upper);
    let [namespaces, fields] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(lower);
    // As many as the tallest table shows (less its header).
    let limit = usize::from(upper.height.max(lower.height).saturating_sub(1));
    let top = Top::of(visible.iter().map(|e| &e.record), limit.max(1));
    for (title, ranked, area) in [
        ("RULE", &top.rules, rules),
        ("USER", &top.users, users),
        ("NAMESPACE", &top.namespaces, namespaces),
        ("DENIED FIELD", &top.fields, fields),
    ] {
        frame.render_widget(ranking(title, ranked, top.records), area);
    }
}

/// One ranking: count, share of the records, name.
fn ranking<'a>(title: &'a str, ranked: &'a Ranked, records: usize) -> Table<'a> {
    let rows = ranked.iter().map(|(name, count)| {
        let share = count * 100 / records.max(1);
        Row::new([count.to_string(), format!("{share}%"), name.clone()])
    });
    Table::new(
        rows,
        [
            Constraint::Length(6),
            Constraint::Length(5),
            Constraint::Fill(1),
        ],
    )
    .header(Row::new(["COUNT", "SHARE", title]).style(BOLD))
    .column_spacing(1)
}
