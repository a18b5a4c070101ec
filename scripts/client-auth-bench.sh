#!/usr/bin/env bash
# Client authentication on vs off, side by side (issue 23; reference §6 "Who may call"): the
# agent as scripts/load-bench.sh runs it (20 rule files, TLS, INFO log), once with
# --client-ca-file (the load presenting the API server's certificate) and once without, loaded
# with the realistic image-edit review over keep-alive HTTPS connections (as the API server
# keeps them) by bench/examples/tls_load.rs (wrk cannot present a client certificate), in
# alternating rounds. Prints each round, the median requests/sec of each, the ratio on/off and
# the median p50 and p99.
#
#   scripts/client-auth-bench.sh
#
# Environment: ROUNDS=5 DURATION=10 CONNECTIONS=16 REVIEW=image.json BUILD=1
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-5}" DURATION="${DURATION:-10}" CONNECTIONS="${CONNECTIONS:-16}"
REVIEW="${REVIEW:-image.json}"
for n in ROUNDS DURATION CONNECTIONS; do
  [[ "${!n}" =~ ^[0-9]+$ && "${!n}" -ge 1 ]] || { echo "$n must be a positive integer (got ${!n})" >&2; exit 2; }
done
if [[ "${BUILD:-1}" == 1 ]]; then
  echo "building release binaries..." >&2
  cargo build --release -p drift-sentinel -p drift-bench --bins --example tls_load --quiet
fi
bin="${CARGO_TARGET_DIR:-target}/release"
load="$bin/examples/tls_load"
work="$(mktemp -d "${TMPDIR:-/tmp}/client-auth-bench.XXXXXX")"
agent_pid=""
cleanup() {
  [[ -n "$agent_pid" ]] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fx="$work/fixtures"
"$bin/drift-bench-fixtures" "$fx" >/dev/null
[[ -f "$fx/$REVIEW" ]] || { echo "no review $REVIEW in the fixtures" >&2; exit 2; }

# Runs one round: $1 on|off. Prints the tls_load line.
round() {
  local mode="$1" port admin extra=() identity=()
  port=$((20000 + RANDOM % 10000)); admin=$((port + 1))
  if [[ "$mode" == on ]]; then
    extra=(--client-ca-file "$fx/clients-ca.crt")
    identity=("$fx/client.pem")
  fi
  "$bin/drift-sentinel" serve --address "127.0.0.1:$port" --admin-address "127.0.0.1:$admin" \
    --tls-cert-file "$fx/tls.crt" --tls-key-file "$fx/tls.key" --rules "$fx/rules" \
    --log-level INFO "${extra[@]}" >"$work/agent-$mode.log" 2>&1 &
  agent_pid=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null --cacert "$fx/ca.crt" "https://127.0.0.1:$port/readyz" && break
    sleep 0.1
  done
  # Warm-up, then the measured run.
  "$load" "https://127.0.0.1:$port/validate" "$fx/$REVIEW" "$fx/ca.crt" "$CONNECTIONS" 2 "${identity[@]}" >/dev/null
  "$load" "https://127.0.0.1:$port/validate" "$fx/$REVIEW" "$fx/ca.crt" "$CONNECTIONS" "$DURATION" "${identity[@]}"
  kill "$agent_pid"; wait "$agent_pid" 2>/dev/null || true; agent_pid=""
}

: >"$work/results"
for r in $(seq 1 "$ROUNDS"); do
  order=(on off); (( r % 2 == 0 )) && order=(off on)
  for mode in "${order[@]}"; do
    line="$(round "$mode")"
    echo "round $r client-auth $mode: $line"
    echo "$mode $line" >>"$work/results"
    [[ "$line" == *"statuses {200: "*"}"* && "$line" != *", "* ]] || { echo "unexpected statuses: $line" >&2; exit 1; }
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for field in rps p50_ms p99_ms; do
  for mode in on off; do
    value=$(awk -v m="$mode" -v f="$field" '$1==m {for (i=2;i<=NF;i++) if ($i==f) print $(i+1)}' "$work/results" | median)
    printf -v "${field}_$mode" '%s' "$value"
  done
done
echo "median rps: on $rps_on, off $rps_off, ratio on/off $(awk -v a="$rps_on" -v b="$rps_off" 'BEGIN {printf "%.3f", a/b}')"
echo "median p50: on $p50_ms_on ms, off $p50_ms_off ms; median p99: on $p99_ms_on ms, off $p99_ms_off ms"
