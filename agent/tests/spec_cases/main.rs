//! Independent, black-box conformance cases for reference §2 (Rules), §3 (Decision), §4 (Paths and
//! diff) and §5 (Admission protocol). Every test starts the real `drift-sentinel` binary offline
//! (`--rules DIR --namespaces FILE`), posts AdmissionReviews to `/validate` over HTTP and checks
//! only what the specification requires of the response.
//!
//! The cases are table-driven: each table row is one request and its expected outcome; a test
//! runs all its rows and reports every row that does not conform.

#[path = "../support/mod.rs"]
mod support;

mod fixtures;

mod coverage;
mod fields;
mod lists;
mod matching;
mod modes;
mod protocol;
mod rendering;
mod scale;
mod users_and_bypass;
mod validation;
