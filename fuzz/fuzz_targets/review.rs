//! (a) The review parser and the decision: `parse_review`, then `evaluate` against a fixed
//! realistic rule set (both detail levels), `response()` and its encoding, with reference §5's bounds
//! asserted (see engine/tests/common/admission_bounds.rs, shared with the stable tests).
#![no_main]

use std::sync::LazyLock;

use drift_engine::RuleSet;
use libfuzzer_sys::fuzz_target;

#[path = "../../engine/tests/common/admission_bounds.rs"]
mod admission_bounds;

static RULES: LazyLock<RuleSet> = LazyLock::new(admission_bounds::rules);

fuzz_target!(|data: &[u8]| {
    let body = admission_bounds::body_of(data);
    admission_bounds::check_body(&RULES, &body);
});
