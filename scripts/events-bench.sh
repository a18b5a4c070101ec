#!/usr/bin/env bash
# Events on vs off under load, in one run (issue 43, reference §6 "Events"): two agents in cluster
# mode against the same real kube-apiserver (bench/examples/events_cluster), one with --events, one
# with --events=false, loaded in alternating rounds by wrk with the load benchmark's ~29 KB
# replicas.json review under a warn-mode rule: every request is a warned edit, so every decision
# of the agent with Events makes an Event finding (queued; the writer aggregates them into one
# Event with a series count). Prints each round's requests/sec, the medians, on/off, and the Event
# metrics of the agent with Events (writes made, findings dropped).
#   scripts/events-bench.sh
#   ROUNDS=6 DURATION=10 CONNECTIONS=16 WARMUP=2
# Timings on a shared machine swing: compare the two agents within one run.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-6}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-16}"
WARMUP="${WARMUP:-2}"
command -v wrk >/dev/null || { echo "wrk not found" >&2; exit 2; }
[[ -x .tools/cluster/kube-apiserver ]] || { echo "the control plane is missing: run bash .ci/build-cluster" >&2; exit 2; }
if [[ "${BUILD:-1}" == 1 ]]; then
  echo "building release binaries..." >&2
  cargo build --release -p drift-sentinel -p drift-bench --bins --example events_cluster --quiet
fi
bin="${CARGO_TARGET_DIR:-target}/release"

work="$(mktemp -d "${TMPDIR:-/tmp}/events-bench.XXXXXX")"
pids=()
cleanup() {
  [[ "$BASHPID" == "$$" ]] || return 0
  exec 7>&- 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "events-bench: FAILED: $*" >&2; exit 1; }

"$bin/drift-bench-fixtures" "$work/fx" >/dev/null
body="$work/fx/replicas.json"

# The cluster lives while fd 7 (its standard input) is open.
mkfifo "$work/hold"
"$bin/examples/events_cluster" <"$work/hold" >"$work/cluster.out" 2>"$work/cluster.err" &
pids+=($!)
exec 7>"$work/hold"
for _ in $(seq 1 600); do
  [[ -s "$work/cluster.out" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || fail "the cluster did not start: $(tail -20 "$work/cluster.err")"
  sleep 0.5
done
kubeconfig="$(head -1 "$work/cluster.out")"
[[ -f "$kubeconfig" ]] || fail "no kubeconfig from the cluster: $(tail -20 "$work/cluster.err")"

port=28430
start_agent() {
  local name="$1" events="$2"
  port=$((port + 2))
  "$bin/drift-sentinel" serve --address "127.0.0.1:$port" --admin-address "127.0.0.1:$((port + 1))" \
    --kubeconfig "$kubeconfig" --pod-namespace drift-sentinel --pod-name "$name" \
    --cluster-rule-namespaces drift-sentinel,teams --events="$events" --log-level INFO \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)" == 200 ]] && break
    sleep 0.1
  done
  [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)" == 200 ]] \
    || fail "agent $name not ready: $(tail -5 "$work/$name.log")"
  answer="$(curl -s -H 'Content-Type: application/json' --data-binary @"$body" "http://127.0.0.1:$port/validate")"
  [[ "$answer" == *'"allowed":true'* && "$answer" == *'"result":"warned"'* ]] \
    || fail "agent $name does not warn about replicas.json: ${answer:0:400}"
  agent_url="http://127.0.0.1:$port"
}
start_agent events-on true
on_url="$agent_url"
start_agent events-off false
off_url="$agent_url"

cat >"$work/post.lua" <<'LUA'
local file = assert(io.open(os.getenv("WRK_BODY"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
LUA
run_wrk() {
  local url="$1" seconds="$2" out="$work/wrk.out"
  WRK_BODY="$body" wrk -t1 -c"$CONNECTIONS" -d"${seconds}s" -s "$work/post.lua" "$url/validate" >"$out" 2>&1 \
    || fail "wrk failed against $url: $(cat "$out")"
  grep -q 'Non-2xx' "$out" && fail "non-2xx answers from $url: $(cat "$out")"
  awk '/^Requests\/sec/ {print $2}' "$out"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

on=() off=()
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 2 )); then order=(on off); else order=(off on); fi
  for which in "${order[@]}"; do
    url="$on_url"; [[ "$which" == off ]] && url="$off_url"
    run_wrk "$url" "$WARMUP" >/dev/null
    rps="$(run_wrk "$url" "$DURATION")"
    echo "round $round events-$which: $rps requests/sec"
    if [[ "$which" == on ]]; then on+=("$rps"); else off+=("$rps"); fi
  done
done
on_median="$(printf '%s\n' "${on[@]}" | median)"
off_median="$(printf '%s\n' "${off[@]}" | median)"
echo "median requests/sec: events on $on_median, events off $off_median; on/off $(awk -v a="$on_median" -v b="$off_median" 'BEGIN {printf "%.3f", a / b}')"
ratios="$(for i in "${!on[@]}"; do awk -v a="${on[$i]}" -v b="${off[$i]}" 'BEGIN {printf "%.3f\n", a / b}'; done | tr '\n' ' ')"
echo "on/off round by round: $ratios"
echo "the agent with Events:"
curl -s "${on_url}/metrics" | grep -E '^drift_sentinel_(event_writes|events_dropped)_total' || true
