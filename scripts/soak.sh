#!/usr/bin/env bash
# Soak benchmark (issue 13): 10 minutes of mixed traffic (allowed, denied, warned, dry-run,
# large, malformed) against the release binary over HTTPS with admission violation export on,
# the rule file rewritten every second and the TLS pair rotated every 30 s. Prints errors, p99
# and RSS per minute, and violations sent against records published + dropped (and what the
# reader consumed). Goal: 0 errors, RSS flat (last minute within 10 % of the second), every
# violation accounted for; exits non-zero otherwise. Not a CI test.
#
#   scripts/soak.sh                      (SOAK_SECONDS=600 SOAK_RATE=100 SOAK_CLIENTS=4)
#
# Needs python3 and openssl. Loopback only; everything it starts stops when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -p drift-sentinel --quiet
exec python3 scripts/soak.py "$target/release/drift-sentinel"
