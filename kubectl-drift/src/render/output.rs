//! How every command prints: the same facts as a document (`-o json|yaml`) or as text a person
//! reads (`-o text`), coloured as `--color` says.

use serde_json::Value;

use crate::cli::Output;
use crate::plan::Print;

/// ANSI colours, or none.
pub(crate) struct Style {
    colour: bool,
}

impl Style {
    pub(crate) fn new(colour: bool) -> Self {
        Self { colour }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn red(&self, text: &str) -> String {
        self.paint("1;31", text)
    }
    pub(crate) fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }
    pub(crate) fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }
    pub(crate) fn magenta(&self, text: &str) -> String {
        self.paint("35", text)
    }
    pub(crate) fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }
}

/// The characters of `text` a terminal shows: its ANSI colour codes left out.
pub(crate) fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut in_escape = false;
    for c in text.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (false, _) => width += 1,
            (true, 'm') => in_escape = false,
            (true, _) => {}
        }
    }
    width
}

/// Prints `document` as JSON or YAML, or the text `text` makes with the style `print` asks for.
pub(crate) fn emit(
    print: Print,
    document: &Value,
    text: impl FnOnce(Style) -> String,
) -> anyhow::Result<()> {
    match print.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(document)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(document)?),
        Output::Text => print!("{}", text(Style::new(print.colour))),
    }
    Ok(())
}
