//! (d) The `/violations` query string, and the record lines it serves: any text parses or
//! fails with a message; a parsed `since` is a real time; any line parses as a record or not,
//! without panicking, and a record's accessors hold.
#![no_main]

use drift_api::violation::{ViolationRecord, ViolationsQuery};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match ViolationsQuery::parse(Some(&text)) {
        Ok(query) => {
            // The same parameters, spelt once more, are an error (repeated parameters).
            if !text.is_empty() && (query.follow || query.source.is_some() || query.since.is_some()) {
                let doubled = format!("{text}&{text}");
                let _ = ViolationsQuery::parse(Some(&doubled));
            }
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
    if let Some(record) = ViolationRecord::parse(&text) {
        let _ = record.source();
        let _ = record.time();
        let _ = record.object();
        let _ = record.rule();
        let _ = record.user_name();
    }
});
