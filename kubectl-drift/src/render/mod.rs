//! What the commands print. [`output`]: `-o text|json|yaml` and the colours every text output
//! uses (also `status`, `audit` and `tail --no-tui`). [`preview`] and [`explain`]: the screens
//! and documents of those commands, made of an evaluation the command made and the rules it
//! evaluated with; [`common`]: what both show.

mod common;
mod explain;
mod output;
mod preview;

pub(crate) use explain::explain;
pub(crate) use output::{Style, emit, visible_width};
pub(crate) use preview::{PreviewParts, preview_parts};
