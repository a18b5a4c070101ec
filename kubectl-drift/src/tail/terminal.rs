//! The terminal of the TUI: raw mode and the alternate screen, left on every way out — normal
//! return, error, panic (a hook that restores before the panic message is printed) and
//! termination signals (SIGINT, SIGTERM, SIGHUP, which the event loop waits on as
//! [`Signals`]; Ctrl-C typed in raw mode arrives as a key).

use std::io::{self, Write};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{Signal, SignalKind, signal};

use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

/// The terminal is in raw mode and on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// A thread panicked while the TUI was up.
static PANICKED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Leaves raw mode and the alternate screen, once, whoever calls it first.
pub(crate) fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let mut out = io::stdout();
        let _ = execute!(out, LeaveAlternateScreen, Show);
        let _ = out.flush();
    }
}

/// True once any thread panicked while the TUI was up; the event loop then stops.
pub(crate) fn panicked() -> bool {
    PANICKED.load(Ordering::SeqCst)
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if ACTIVE.load(Ordering::SeqCst) {
                PANICKED.store(true, Ordering::SeqCst);
            }
            restore();
            previous(info);
        }));
    });
}

/// The signals that end the TUI.
pub(crate) struct Signals(Vec<Signal>);

impl Signals {
    pub(crate) fn new() -> io::Result<Signals> {
        let kinds = [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
        ];
        kinds
            .into_iter()
            .map(signal)
            .collect::<io::Result<Vec<_>>>()
            .map(Signals)
    }

    /// Resolves when one of them arrives.
    pub(crate) async fn recv(&mut self) {
        let waits = self.0.iter_mut().map(|s| Box::pin(s.recv()));
        futures::future::select_all(waits).await;
    }
}

/// Raw mode and the alternate screen while it lives.
pub(crate) struct Guard(());

impl Guard {
    pub(crate) fn enter() -> io::Result<Guard> {
        install_panic_hook();
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        execute!(io::stdout(), EnterAlternateScreen, Hide)?;
        Ok(Guard(()))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}
