#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ one at a time, niced, each for a given number of seconds
# (issue 13). Needs nightly and cargo-fuzz (`cargo install cargo-fuzz`). Not part of CI: the
# stable guards are the proptest and regression tests in engine/tests and agent/tests.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# The growing corpus is fuzz/corpus/<target> (ignored by git); the committed seeds are
# fuzz/seeds/<target>. A crash leaves its input in fuzz/artifacts/<target>/: turn it into a
# regression test (engine/tests/fuzz_regressions.rs, agent/tests/fuzz_regressions.rs) before
# fixing it. A summary line per target goes to fuzz/runs.log (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-1800}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(review rule_compile path_pattern violations_query spool_recovery)
fi

nice -n 19 cargo +nightly fuzz build -O

for target in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  extra=()
  # The reader warns on standard error for every line that is not JSON: keep libFuzzer's own
  # output only.
  [ "$target" = spool_recovery ] && extra+=(-close_fd_mask=2)
  started=$(date -u +%FT%TZ)
  set +e
  nice -n 19 cargo +nightly fuzz run -O "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 "${extra[@]}" >"fuzz/$target.out" 2>&1
  status=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "fuzz/$target.out" | grep -o '[0-9]*$' || echo '?')
  echo "$started $target seconds=$seconds exit=$status execs=$execs corpus=$(ls "fuzz/corpus/$target" | wc -l) artifacts=$(ls "fuzz/artifacts/$target" | wc -l)" | tee -a fuzz/runs.log
done
