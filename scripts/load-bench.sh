#!/usr/bin/env bash
# The side-by-side load benchmark of the webhook (issue 12; reference §5 "Bounded answers").
#
# The agent (`drift-sentinel serve`, 20 rule files with the matching rule tried last, TLS, INFO
# log with its per-request line) against two references on the agent's own serving stack (TLS,
# timeouts, body limit): `drift-reference` parses the review into serde_json::Value and answers
# allowed; `drift-floor` only finds the uid by a byte search and answers, so no decision can be
# cheaper (`CHECKED=1` adds a fourth, below). All three are loaded with the same realistic
# ~29 KB Deployment review by `wrk`, in alternating rounds (the order rotates every round). For each review (image-only change:
# allowed; replicas change: denied; the image change as a client-side `kubectl apply` sends it,
# with a 13 KB last-applied annotation on each side, 57 KB: allowed) it prints the median requests/sec of each, the ratios
# agent/reference and agent/floor, the median p50 and p99 of each with the p99 ratio
# agent/floor, the same two ratios round by round (each round's agent against its floor) as a
# median with a 90 % interval, and each server's peak RSS (VmHWM; fresh servers per review). Then the worst cases: a fresh
# agent per review, one POST of args-200k.json (200,000 changed args) and items-2m.json
# (2,000,000 changed items, ~8 MB): HTTP status, wall time (and the agent's own logged latency),
# response bytes, the largest log line, and the rise of VmHWM, against reference §5's bounds (peak +4×body+1 MiB, 0.5 s, 64 KiB).
# The reference gets the same single POSTs, for scale.
#
#   scripts/load-bench.sh
#
# Environment:
#   ROUNDS=5 DURATION=10 CONNECTIONS=16 WARMUP=2   rounds per review, seconds per wrk run, wrk
#                                                  connections, seconds of warm-up per server
#   QUICK=1     a smoke run (2 rounds of 2 s, 1 s warm-up)
#   REVIEWS="image.json replicas.json apply.json"   the reviews loaded, in this order
#   BUILD=0     use the release binaries already in $CARGO_TARGET_DIR (or target/) as they are
#   PLAIN=1     serve plain HTTP instead of TLS (the stack's floor without the cipher)
#   CHECKED=1   a fourth server, `drift-checked-floor`: the floor with the one strict pass over
#               the body that every answer needs (reference §5), and the ratio agent/checked
#               floor: what the decision costs beyond that work
#   STRICT=1    exit 1 when agent/reference is below 1.0, agent/floor below 0.50, the agent's p99
#               above 1.5× the floor's, or a worst case exceeds a bound
#   KEEP=1      keep the work directory (fixtures, wrk outputs, logs) and print its path
#
# Timings on a shared machine swing from run to run: compare the two servers side by side within
# one run, not numbers across runs. Needs wrk and curl.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${QUICK:-0}" == 1 ]]; then
  ROUNDS="${ROUNDS:-2}" DURATION="${DURATION:-2}" WARMUP="${WARMUP:-1}"
fi
ROUNDS="${ROUNDS:-5}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-16}"
WARMUP="${WARMUP:-2}"
for n in ROUNDS DURATION CONNECTIONS WARMUP; do
  [[ "${!n}" =~ ^[0-9]+$ && "${!n}" -ge 1 ]] || { echo "$n must be a positive integer (got ${!n})" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "wrk not found" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl not found" >&2; exit 2; }

if [[ "${BUILD:-1}" == 1 ]]; then
  echo "building release binaries..." >&2
  cargo build --release -p drift-sentinel -p drift-bench --quiet
fi
bin="${CARGO_TARGET_DIR:-target}/release"
for b in drift-sentinel drift-reference drift-floor drift-checked-floor drift-bench-fixtures; do
  [[ -x "$bin/$b" ]] || { echo "$bin/$b is missing: build with cargo build --release -p drift-sentinel -p drift-bench" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/load-bench.XXXXXX")"
pids=()
cleanup() {
  # Only the script itself cleans up, not a subshell that exits.
  [[ "$BASHPID" == "$$" ]] || return 0
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [[ "${KEEP:-0}" == 1 ]]; then
    echo "work directory kept: $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "load-bench: FAILED: $*" >&2
  exit 1
}

fx="$work/fixtures"
"$bin/drift-bench-fixtures" "$fx" >"$work/fixtures.txt"
ca="$fx/ca.crt"

# Sets $port to a free loopback port: one nothing answers on (bash's /dev/tcp), below the
# ephemeral range, never handed out before in this run.
used_ports=" "
free_port() {
  while :; do
    port=$((20000 + RANDOM % 12000))
    [[ "$used_ports" == *" $port "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      used_ports+="$port "
      return
    fi
  done
}

scheme=https
[[ "${PLAIN:-0}" == 1 ]] && scheme=http

# Starts a server; sets $started_pid and $started_url. $1: agent, reference, floor or checked (the
# checked floor), $2: log file.
start_server() {
  local kind="$1" log="$2" port admin_port
  free_port
  admin_port=$port
  free_port
  local tls=(--address "127.0.0.1:$port")
  [[ "$scheme" == https ]] && tls+=(--tls-cert-file "$fx/tls.crt" --tls-key-file "$fx/tls.key")
  case "$kind" in
    agent)
      "$bin/drift-sentinel" serve "${tls[@]}" --rules "$fx/rules" \
        --admin-address "127.0.0.1:$admin_port" --log-level INFO >"$log" 2>"$work/agent-$port.err" &
      ;;
    reference) "$bin/drift-reference" "${tls[@]}" >"$log" 2>"$work/reference-$port.err" & ;;
    floor) "$bin/drift-floor" "${tls[@]}" >"$log" 2>"$work/floor-$port.err" & ;;
    checked) "$bin/drift-checked-floor" "${tls[@]}" >"$log" 2>"$work/checked-$port.err" & ;;
  esac
  started_pid=$!
  pids+=("$started_pid")
  started_url="$scheme://127.0.0.1:$port"
  local probe=(curl -s -o /dev/null -w '%{http_code}' --cacert "$ca" --max-time 2)
  if [[ "$kind" == agent ]]; then
    probe+=("$started_url/readyz")
  else
    probe+=(-H 'Content-Type: application/json' --data-binary @"$fx/image.json" "$started_url/validate")
  fi
  for _ in $(seq 1 300); do
    kill -0 "$started_pid" 2>/dev/null || fail "the $kind stopped: $(cat "$work/$kind-$port.err")"
    [[ "$("${probe[@]}" 2>/dev/null || true)" == 200 ]] && return
    sleep 0.1
  done
  fail "the $kind was not ready within 30 s: $(cat "$work/$kind-$port.err")"
}

stop_server() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

vmhwm_kb() {
  awk '/^VmHWM:/ {print $2}' "/proc/$1/status"
}

mib() {
  awk -v kb="$1" 'BEGIN {printf "%.1f MiB", kb / 1024}'
}

# POSTs a body once: prints "HTTP_CODE SECONDS BYTES"; the answer goes to $3.
post_once() {
  curl -sS --cacert "$ca" --max-time 120 -o "$3" -w '%{http_code} %{time_total} %{size_download}\n' \
    -H 'Content-Type: application/json' --data-binary @"$2" "$1/validate"
}

# The answer must be an AdmissionReview with the request's uid and the expected verdict.
check_answer() {
  local who="$1" name="$2" file="$3" allowed="$4" uid
  uid="$(grep -o '"uid" *: *"bench-[^"]*"' "$fx/$name" | head -1 | sed 's/.*"\(bench-[^"]*\)"/\1/')"
  grep -q "\"uid\":\"$uid\"" "$file" || fail "$who's answer to $name lacks uid $uid: $(head -c 600 "$file")"
  grep -q "\"allowed\":$allowed" "$file" || fail "$who's answer to $name is not allowed:$allowed: $(head -c 600 "$file")"
}

cat >"$work/post.lua" <<'EOF'
-- POSTs the file named by WRK_BODY as JSON on every request.
local file = assert(io.open(os.getenv("WRK_BODY"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
EOF

# A wrk --latency value (635.00us, 2.10ms, 1.02s, 1.00m) in milliseconds.
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
    else if (u != "ms") { print "bad latency " v > "/dev/stderr"; exit 1 }
    printf "%.3f", n }'
}

# Runs wrk; prints "RPS P50_MS P99_MS". Fails on any non-2xx answer or socket error.
run_wrk() {
  local url="$1" body="$2" seconds="$3" out="$4"
  WRK_BODY="$body" wrk --latency -t1 -c"$CONNECTIONS" -d"${seconds}s" -s "$work/post.lua" "$url/validate" >"$out" 2>&1 \
    || fail "wrk exited with an error against $url: $(cat "$out")"
  local requests non2xx socket rps p50 p99
  requests="$(awk '/requests in/ {print $1}' "$out")"
  [[ -n "$requests" && "$requests" -gt 0 ]] || fail "wrk made no request against $url: $(cat "$out")"
  non2xx="$(awk -F': *' '/Non-2xx or 3xx responses/ {print $2}' "$out")"
  [[ -z "$non2xx" || "$non2xx" == 0 ]] || fail "$non2xx non-2xx answers from $url: $(cat "$out")"
  socket="$(grep 'Socket errors' "$out" || true)"
  [[ -z "$socket" ]] || fail "socket errors against $url ($socket): $(cat "$out")"
  rps="$(awk '/^Requests\/sec:/ {print $2}' "$out")"
  p50="$(awk '$1 == "50%" {print $2}' "$out")"
  p99="$(awk '$1 == "99%" {print $2}' "$out")"
  [[ -n "$rps" && -n "$p50" && -n "$p99" ]] || fail "cannot read wrk's output: $(cat "$out")"
  echo "$rps $(to_ms "$p50") $(to_ms "$p99")"
}

median() {
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {
    if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Round by round: the median of agent/floor over the rounds and a 90 % interval for it, from
# drawing the rounds again (with replacement) 2,000 times, seeded. The agent and the floor of
# one round ran one after the other, so a round's ratio leaves out most of what the machine
# did to both; how far the rounds' ratios disagree is what the interval shows.
# $1: the agent's values, $2: the floor's, one list each, in round order.
paired_ratio() {
  awk -v a="$1" -v f="$2" '
    function med(v, n,   i, j, t, s) {
      for (i = 1; i <= n; i++) s[i] = v[i]
      for (i = 2; i <= n; i++) for (j = i; j > 1 && s[j - 1] > s[j]; j--) { t = s[j]; s[j] = s[j - 1]; s[j - 1] = t }
      return (n % 2) ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
    }
    BEGIN {
      n = split(a, av, " "); m = split(f, fv, " ")
      if (n != m || n == 0) { print "paired_ratio: " n " agent rounds against " m " floor rounds" > "/dev/stderr"; exit 1 }
      for (i = 1; i <= n; i++) r[i] = av[i] / fv[i]
      srand(27)
      for (b = 1; b <= 2000; b++) {
        for (i = 1; i <= n; i++) d[i] = r[int(rand() * n) + 1]
        est[b] = med(d, n)
      }
      # The 5th and 95th percentiles of the redrawn medians.
      k = 2000; for (i = 2; i <= k; i++) for (j = i; j > 1 && est[j - 1] > est[j]; j--) { t = est[j]; est[j] = est[j - 1]; est[j - 1] = t }
      printf "%.2f× [%.2f, %.2f]", med(r, n), est[int(0.05 * k) + 1], est[int(0.95 * k)]
    }'
}

verdict() { # name bool -> "ok" / "OVER"
  if [[ "$1" == 1 ]]; then echo "ok"; else echo "OVER"; fi
}

over_bounds=0
echo "load-bench: $ROUNDS rotating rounds of ${DURATION}s per server and review, wrk -t1 -c$CONNECTIONS over $scheme, ${WARMUP}s warm-up; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "fixtures: $(awk '{sub(".*/", "", $1); printf "%s%s %d B", sep, $1, $2; sep = ", "}' "$work/fixtures.txt"); 20 rules, the match last"
echo

declare -A allowed_of=([image.json]=true [replicas.json]=false [apply.json]=true)
read -r -a reviews <<<"${REVIEWS:-image.json replicas.json apply.json}"
for name in "${reviews[@]}"; do
  [[ -n "${allowed_of[$name]:-}" ]] || fail "REVIEWS: $name is not one of ${!allowed_of[*]}"
done
servers=(agent reference floor)
[[ "${CHECKED:-0}" == 1 ]] && servers+=(checked)
for name in "${reviews[@]}"; do
  body="$fx/$name"
  declare -A url_of=() pid_of=() rps_of=() p50_of=() p99_of=()
  for who in "${servers[@]}"; do
    start_server "$who" /dev/null
    pid_of[$who]=$started_pid url_of[$who]=$started_url
    post_once "$started_url" "$body" "$work/answer.json" >/dev/null
    if [[ "$who" == agent ]]; then
      check_answer agent "$name" "$work/answer.json" "${allowed_of[$name]}"
    else
      check_answer "$who" "$name" "$work/answer.json" true
    fi
    run_wrk "$started_url" "$body" "$WARMUP" "$work/warmup.txt" >/dev/null
  done

  for round in $(seq 1 "$ROUNDS"); do
    # The order rotates: over as many rounds as servers, each server runs once in each place.
    shift_by=$(((round - 1) % ${#servers[@]}))
    order=("${servers[@]:shift_by}" "${servers[@]:0:shift_by}")
    line="  round $round:"
    for who in "${order[@]}"; do
      read -r rps p50 p99 < <(run_wrk "${url_of[$who]}" "$body" "$DURATION" "$work/wrk-$name-$round-$who.txt") \
        || fail "wrk against the $who"
      [[ -n "${rps:-}" ]] || fail "wrk against the $who (round $round) gave no result"
      rps_of[$who]+=" $rps" p50_of[$who]+=" $p50" p99_of[$who]+=" $p99"
      line+=" $who $rps rps p50 ${p50} ms p99 ${p99} ms;"
    done
    echo "$line"
  done
  declare -A m_rps=() m_p50=() m_p99=()
  for who in "${servers[@]}"; do
    # shellcheck disable=SC2086 # the lists are words
    m_rps[$who]="$(median ${rps_of[$who]})" m_p50[$who]="$(median ${p50_of[$who]})" m_p99[$who]="$(median ${p99_of[$who]})"
  done
  ratio() { awk -v a="$1" -v r="$2" 'BEGIN {printf "%.2f", a / r}'; }
  to_reference="$(ratio "${m_rps[agent]}" "${m_rps[reference]}")"
  to_floor="$(ratio "${m_rps[agent]}" "${m_rps[floor]}")"
  p99_to_floor="$(ratio "${m_p99[agent]}" "${m_p99[floor]}")"
  awk -v a="$to_reference" -v f="$to_floor" -v p="$p99_to_floor" 'BEGIN {exit !(a < 1.0 || f < 0.5 || p > 1.5)}' && over_bounds=1
  printf '%s (%s): throughput agent/reference %s×, agent/floor %s× (goal ≥ 0.50×); p99 agent/floor %s× (goal ≤ 1.5×)\n' \
    "$name" "$([[ ${allowed_of[$name]} == true ]] && echo allowed || echo denied)" "$to_reference" "$to_floor" "$p99_to_floor"
  printf '  round by round, median [90 %% interval]: throughput agent/floor %s, p99 agent/floor %s\n' \
    "$(paired_ratio "${rps_of[agent]}" "${rps_of[floor]}")" "$(paired_ratio "${p99_of[agent]}" "${p99_of[floor]}")"
  if [[ -n "${rps_of[checked]:-}" ]]; then
    printf '  against the checked floor: throughput agent/checked %s×, round by round %s; p99 agent/checked %s×\n' \
      "$(ratio "${m_rps[agent]}" "${m_rps[checked]}")" "$(paired_ratio "${rps_of[agent]}" "${rps_of[checked]}")" \
      "$(ratio "${m_p99[agent]}" "${m_p99[checked]}")"
  fi
  for who in "${servers[@]}"; do
    printf '  %-10s %10.0f rps  p50 %7.3f ms  p99 %7.3f ms  peak RSS %s\n' \
      "$who" "${m_rps[$who]}" "${m_p50[$who]}" "${m_p99[$who]}" "$(mib "$(vmhwm_kb "${pid_of[$who]}")")"
  done
  echo
  for who in "${servers[@]}"; do
    stop_server "${pid_of[$who]}"
  done
done

echo "worst cases (one POST each to a fresh server; reference §5 bounds: peak +4×body+1 MiB, 0.5 s, answer ≤ 64 KiB):"
for name in args-200k.json items-2m.json; do
  body="$fx/$name"
  size="$(stat -c %s "$body")"
  bound_kb=$(((4 * size + 1024 * 1024) / 1024))
  for who in agent reference; do
    log="$work/worst-$who.log"
    start_server "$who" "$log"
    pid=$started_pid
    before="$(vmhwm_kb "$pid")"
    read -r code seconds bytes < <(post_once "$started_url" "$body" "$work/answer.json") || fail "POST $name to the $who"
    after="$(vmhwm_kb "$pid")"
    stop_server "$pid"
    [[ "$code" == 200 ]] || fail "the $who answered $name with HTTP $code: $(head -c 600 "$work/answer.json")"
    rise=$((after - before))
    if [[ "$who" == agent ]]; then
      check_answer agent "$name" "$work/answer.json" false
      log_bytes="$(LC_ALL=C awk '{if (length($0) > m) m = length($0)} END {print m + 0}' "$log")"
      # The agent's own latency from its decision line (the wall time adds the TLS upload).
      logged="$(grep -o '"latency_us":[0-9]*' "$log" | tail -1 | cut -d: -f2)"
      [[ -n "$logged" ]] || fail "the agent logged no decision line for $name: $(tail -c 600 "$log")"
      mem_ok=$((rise <= bound_kb)) time_ok="$(awk -v s="$seconds" 'BEGIN {print (s <= 0.5)}')" size_ok=$((bytes <= 65536))
      ((mem_ok && time_ok && size_ok)) || over_bounds=1
      printf '  %-15s agent      HTTP %s  %6.3f s (%s; logged %.3f s)  answer %9d B (%s)  peak RSS %s → %s: +%s, bound %s (%s)  longest log line %d B\n' \
        "$name" "$code" "$seconds" "$(verdict "$time_ok")" "$(awk -v us="$logged" 'BEGIN {print us / 1e6}')" \
        "$bytes" "$(verdict "$size_ok")" \
        "$(mib "$before")" "$(mib "$after")" "$(mib "$rise")" "$(mib "$bound_kb")" "$(verdict "$mem_ok")" "$log_bytes"
    else
      check_answer reference "$name" "$work/answer.json" true
      printf '  %-15s reference  HTTP %s  %6.3f s        answer %9d B       peak RSS %s → %s: +%s\n' \
        "$name" "$code" "$seconds" "$bytes" "$(mib "$before")" "$(mib "$after")" "$(mib "$rise")"
    fi
    rm -f "$log"
  done
done

if [[ "${STRICT:-0}" == 1 && "$over_bounds" == 1 ]]; then
  echo "load-bench: a ratio misses its goal or a worst case exceeds a bound (STRICT=1)" >&2
  exit 1
fi
