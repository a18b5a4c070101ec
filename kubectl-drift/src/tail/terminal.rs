//! The terminal of the TUI: raw mode and the alternate screen, left on every way out — normal
//! return, error, panic (a hook that restores before the panic message is printed) and
//! termination signals (SIGINT, SIGTERM, SIGHUP set a flag that the event loop checks; Ctrl-C
//! typed in raw mode arrives as a key).

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

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
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let mut out = io::stdout();
        let _ = execute!(out, LeaveAlternateScreen, Show);
        let _ = out.flush();
    }
}

/// True once any thread panicked while the TUI was up; the event loop then stops.
pub fn panicked() -> bool {
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

/// Raw mode and the alternate screen while it lives.
pub struct Guard {
    /// Set by SIGINT, SIGTERM or SIGHUP.
    pub signalled: Arc<AtomicBool>,
    signal_ids: Vec<signal_hook::SigId>,
}

impl Guard {
    pub fn enter() -> io::Result<Guard> {
        install_panic_hook();
        let signalled = Arc::new(AtomicBool::new(false));
        let mut signal_ids = Vec::new();
        for signal in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            signal_ids.push(signal_hook::flag::register(signal, signalled.clone())?);
        }
        let guard = Guard {
            signalled,
            signal_ids,
        };
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        execute!(io::stdout(), EnterAlternateScreen, Hide)?;
        Ok(guard)
    }

    pub fn signalled(&self) -> bool {
        self.signalled.load(Ordering::SeqCst)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
        for id in self.signal_ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
