//! Violation export (SPEC §7). So far: the disk driver (`spool`). The queue, the publisher,
//! the record, the Connection status and the `/violations` stream are to come.

pub mod spool;
