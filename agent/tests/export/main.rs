//! Black-box tests of admission violation export (reference §7, the disk driver of the Gatekeeper
//! seed): the real binary over real HTTP, each test with its own directories and ports.
//!
//! Two hidden flags make time and disk space controllable: `--export-clock-file` (the export's
//! clock reads an RFC 3339 time from a file) and `--export-free-space-file` (free bytes read
//! from a file, measured once per batch). When the free-space file is a FIFO, the publisher blocks on
//! its first append until the test lets it go: that holds the queue full deterministically,
//! without touching the agent.

#[path = "../support/mod.rs"]
mod support;

mod env;

mod command_line;
mod failures;
mod queue;
mod records;
mod segments;
