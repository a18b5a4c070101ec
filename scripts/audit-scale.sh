#!/usr/bin/env bash
# The audit at scale (reference §8 step 5, issue 27 item 3): Deployments of about 3 KB as the API
# server serves them (last-applied baseline included; managedFields come on top) in a real
# kube-apiserver (no controller manager: no ReplicaSets, no Pods), 1% of them drifted by
# `kubectl set image`; one `drift-sentinel audit --once` run at FIRST and at TOTAL objects, with
# OpenReports and the violation export on. For each run it prints the objects audited, the
# drifted ones found (the run fails unless exactly every 100th object is found, in the summary,
# in the export file and in the reports), the wall time, the audit process's peak RSS, and the
# CPU seconds the API server and etcd spent during the run; then the same for a bare paged LIST
# (the page size the audit uses), the floor the API server sets.
#
#   scripts/audit-scale.sh [TOTAL] [FIRST]     (defaults 100000 and 10000)
#
# Environment: CARGO_TARGET_DIR (where the release binary is built), DRIFT_CLUSTER_BIN (the
# control-plane binaries, `bash .ci/build-cluster`), DRIFT_CLUSTER_EXAMPLE (an already built
# testkit `cluster` example; otherwise it is built), PARALLEL (concurrent kubectl processes while
# creating, 4), CHUNK (--audit-chunk-size, 500: the audit's default). The issue's goals, one run
# at 100,000 objects: <= 60 s and peak RSS <= 64 MiB, flat from 10,000. Everything it starts stops
# when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
total="${1:-100000}"
first="${2:-10000}"
per_namespace=1000
drift_every=100
parallel="${PARALLEL:-4}"
chunk="${CHUNK:-500}"

cargo build --release -p drift-sentinel --quiet
target="${CARGO_TARGET_DIR:-target}"
cluster_example="${DRIFT_CLUSTER_EXAMPLE:-}"
if [[ -z "$cluster_example" ]]; then
  cargo build -p drift-testkit --example cluster --quiet
  cluster_example="$target/debug/examples/cluster"
fi
work="$(mktemp -d)"
stop="$work/stop"
cleanup() {
  touch "$stop"
  sleep 3
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$cluster_example" "$stop" --no-controller-manager >"$work/cluster.out" 2>"$work/cluster.err" &
cluster_pid=$!
for _ in $(seq 1 120); do
  grep -q '^KUBECONFIG=' "$work/cluster.out" 2>/dev/null && break
  sleep 1
done
export KUBECONFIG="$(sed -n 's/^KUBECONFIG=//p' "$work/cluster.out")"
kubectl="$(sed -n 's/^KUBECTL=//p' "$work/cluster.out")"
[[ -n "$KUBECONFIG" ]] || { echo "the control plane did not start" >&2; cat "$work/cluster.err" >&2; exit 1; }
# The control plane's processes (children of the cluster example), whose CPU time is read from
# /proc around each run.
apiserver_pid=$(pgrep -P "$cluster_pid" -x kube-apiserver)
etcd_pid=$(pgrep -P "$cluster_pid" -x etcd)
[[ -n "$apiserver_pid" && -n "$etcd_pid" ]] || fail "cannot find the kube-apiserver and etcd processes"

# The rule every Deployment falls under: only spec.replicas may change.
mkdir -p "$work/rules"
cat >"$work/rules/rule.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: workloads
  namespace: drift-system
  annotations: {drift-sentinel.k8s.io/rule: "true"}
data:
  spec: |
    mode: enforce
    namespaces: ["*"]
    selectors: [{apiGroup: apps, kind: Deployment}]
    mutable: [spec.replicas]
EOF

# Reports and export on: the OpenReports CRDs (as the e2e tests install them), the Connection CRD
# (the chart's) and a disk Connection under the export root.
export_root="$work/export"
mkdir -p "$export_root"
"$kubectl" apply -f testkit/crds/openreports.yaml -f charts/drift-sentinel/crds/connection.yaml 2>&1 >/dev/null |
  { grep -v '^Warning:' || true; } >&2
"$kubectl" wait --for condition=established --timeout=60s \
  crd/reports.openreports.io crd/clusterreports.openreports.io \
  crd/connections.connection.drift-sentinel.io >/dev/null
"$kubectl" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: drift-system}
---
apiVersion: connection.drift-sentinel.io/v1alpha1
kind: Connection
metadata: {name: audit-connection, namespace: drift-system}
spec:
  driver: disk
  config: {path: $export_root/topics}
EOF
channel="$export_root/topics/audit-channel"

# Writes Deployments [from, to) as Lists of 250 to $work/batch-*.json, their namespaces to
# $work/namespaces.json, and the drifted ones (every 100th), one line per namespace
# ("-n NAMESPACE deployment/NAME ..."), to $work/drift.args.
generate() {
  python3 - "$work" "$1" "$2" "$per_namespace" "$drift_every" <<'PY'
import json, sys
work, start, end, per_ns, drift_every = sys.argv[1], *map(int, sys.argv[2:])
def deployment(i):
    name = f"svc-{i:06d}"
    labels = {"app": name, "team": f"team-{i % 17}"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": f"scale-{i // per_ns}",
                     "labels": {**labels, "tier": "backend"},
                     "annotations": {"owner": "platform@example.com",
                                     "description": "a realistic service of the scale test"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{
                                  "name": "app", "image": f"registry.example/{name}:1.0",
                                  "env": [{"name": f"SETTING_{k}", "value": f"value-{k}"} for k in range(8)],
                                  "ports": [{"containerPort": 8080, "name": "http"}],
                                  "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                "limits": {"memory": "256Mi"}},
                                  "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080},
                                                     "periodSeconds": 5},
                              }]}}},
    }
batch, n = [], 0
def flush():
    global batch, n
    if batch:
        with open(f"{work}/batch-{n:04d}.json", "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": batch}, f)
        n += 1
        batch = []
for i in range(start, end):
    batch.append(deployment(i))
    if len(batch) == 250:
        flush()
flush()
namespaces = range(start // per_ns, (end - 1) // per_ns + 1)
with open(f"{work}/namespaces.json", "w") as f:
    json.dump({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"scale-{ns}"}} for ns in namespaces]}, f)
with open(f"{work}/drift.args", "w") as f:
    for ns in namespaces:
        names = [f"deployment/svc-{i:06d}" for i in range(max(start, ns * per_ns), min(end, (ns + 1) * per_ns))
                 if i % drift_every == 0]
        if names:
            print("-n", f"scale-{ns}", *names, file=f)
PY
}

# Creates Deployments [from, to) with `kubectl create --save-config` (the baseline is the
# last-applied annotation), PARALLEL Lists at a time, then drifts every 100th: `kubectl set image`
# changes the app container's image behind the baseline's back (field manager kubectl-set), one
# call per namespace, PARALLEL at a time.
create() {
  local from="$1" to="$2" start end
  rm -f "$work"/batch-*.json
  generate "$from" "$to"
  start=$(date +%s.%N)
  "$kubectl" apply -f "$work/namespaces.json" >/dev/null
  # shellcheck disable=SC2016
  printf '%s\n' "$work"/batch-*.json |
    xargs -P "$parallel" -I{} sh -c '"$0" create --save-config -f "$1" >/dev/null' "$kubectl" {} \
      2> >(grep -v '^Warning:' >&2)
  end=$(date +%s.%N)
  # shellcheck disable=SC2016
  xargs -P "$parallel" -L 1 sh -c '"$0" set image "$@" app=registry.example/app:9.9-drifted >/dev/null' \
    "$kubectl" <"$work/drift.args"
  python3 -c 'import sys; n, s, e, d, p = sys.argv[1:]; t = float(e) - float(s); print(f"  created {n} Deployments in {t:.0f} s ({int(n) / t:.0f}/s, {p} kubectl at a time); drift applied in {float(d) - float(e):.0f} s")' \
    "$((to - from))" "$start" "$end" "$(date +%s.%N)" "$parallel"
}

# Runs a command (after its standard output and error files) and prints, as shell assignments:
# its exit status, wall seconds, user and system CPU seconds and peak RSS in KiB (getrusage of
# the waited child: exact, not sampled), and the CPU seconds the API server and etcd spent
# meanwhile (utime + stime from /proc/PID/stat).
cat >"$work/measured.py" <<'PY'
import os, resource, subprocess, sys, time
apiserver, etcd, out, err, command = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
tick = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick
before = cpu(apiserver), cpu(etcd)
start = time.monotonic()
with open(out, "w") as stdout, open(err, "w") as stderr:
    status = subprocess.call(command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
wall = time.monotonic() - start
after = cpu(apiserver), cpu(etcd)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"status={status} wall={wall:.1f} user={usage.ru_utime:.1f} sys={usage.ru_stime:.1f} "
      f"peak_kib={usage.ru_maxrss} apiserver_cpu={after[0] - before[0]:.1f} etcd_cpu={after[1] - before[1]:.1f}")
PY
run_measured() {
  python3 "$work/measured.py" "$apiserver_pid" "$etcd_pid" "$@"
}

# A bare paged LIST of every Deployment (the audit's page size, one connection, each page read
# whole and dropped; items counted by their opening bytes, not parsed): what the API server and
# etcd cost without the audit. Prints the bytes and the objects.
cat >"$work/list.py" <<'PY'
import http.client, re, ssl, sys, urllib.parse
kubeconfig, chunk = sys.argv[1], sys.argv[2]
text = open(kubeconfig).read()
field = lambda key: re.search(rf"{key}: (\S+)", text).group(1)
server = urllib.parse.urlparse(field("server"))
context = ssl.create_default_context(cafile=field("certificate-authority"))
context.load_cert_chain(field("client-certificate"), field("client-key"))
connection = http.client.HTTPSConnection(server.hostname, server.port, context=context)
token, total, items = "", 0, 0
while True:
    path = f"/apis/apps/v1/deployments?limit={chunk}"
    if token:
        path += "&continue=" + urllib.parse.quote(token)
    connection.request("GET", path, headers={"Accept": "application/json"})
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        sys.exit(f"{response.status}: {body[:500]!r}")
    total += len(body)
    items += body.count(b'{"metadata":{"name":')
    # The list's metadata (and its continue token) comes before the items.
    match = re.search(rb'"continue":"([^"]*)"', body[:4096])
    token = match.group(1).decode() if match else ""
    if not token:
        break
print(total, items)
PY

# One audit run at $1 objects, reports and export on, checked: every object audited, exactly
# every 100th drifted, as many records in the run's export file, as many `fail` results in the
# reports.
measure() {
  local objects="$1" status=none wall user sys peak_kib apiserver_cpu etcd_cpu summary
  local want_drifted=$(((objects + drift_every - 1) / drift_every))
  echo "== audit of $objects Deployments (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  eval "$(run_measured "$work/out-$objects.txt" "$work/err-$objects.txt" \
    "$target/release/drift-sentinel" audit --once --rules "$work/rules" --kubeconfig "$KUBECONFIG" \
    --audit-chunk-size "$chunk" --audit-reports openreports \
    --enable-violation-export --export-root "$export_root" \
    --pod-namespace drift-system --pod-name audit-scale-0)"
  summary=$(grep '^audit ' "$work/out-$objects.txt" | tail -1 || true)
  echo "  $summary"
  echo "  exit $status, wall $wall s (audit CPU: user $user s, sys $sys s), peak RSS $peak_kib KiB ($((peak_kib / 1024)) MiB)"
  echo "  during the run: kube-apiserver $apiserver_cpu CPU s, etcd $etcd_cpu CPU s"
  [[ "$status" == 1 ]] || { cat "$work/err-$objects.txt" >&2; fail "the audit exited $status (1: drift found)"; }
  [[ "$summary" =~ :\ ([0-9]+)\ objects:\ ([0-9]+)\ drifted,\ ([0-9]+)\ clean ]] || fail "no summary line"
  local audited="${BASH_REMATCH[1]}" drifted="${BASH_REMATCH[2]}" clean="${BASH_REMATCH[3]}"
  [[ "$audited" == "$objects" ]] || fail "$audited objects audited, want $objects"
  [[ "$drifted" == "$want_drifted" ]] || fail "$drifted drifted found, want $want_drifted (1%)"
  # The run's completed file: a started record, one violation_audited record per drifted
  # object, a completed record.
  local run_file records
  run_file=$(ls -t "$channel"/*.log | head -1)
  records=$(jq -s '[.[] | select(.eventType == "violation_audited")] | length' "$run_file")
  [[ "$records" == "$want_drifted" ]] || fail "$records records in $run_file, want $want_drifted"
  [[ "$(tail -1 "$run_file" | jq -r .message)" == "audit is completed" ]] || fail "$run_file is not completed"
  local reports
  reports=$("$kubectl" get reports.openreports.io -A -o json |
    jq -r '"\(.items | length) \([.items[].summary.fail] | add) \([.items[].summary.pass] | add)"')
  read -r report_count report_fail report_pass <<<"$reports"
  [[ "$report_fail" == "$want_drifted" && "$report_pass" == "$clean" ]] ||
    fail "reports: $report_fail fail and $report_pass pass, want $want_drifted and $clean"
  echo "  drifted found: $drifted of $audited (want $want_drifted: ok); export file: $records records; $report_count Reports: $report_fail fail, $report_pass pass"
}

# The bare paged LIST (list.py), measured like the audit.
bare_list() {
  local status=none wall user sys peak_kib apiserver_cpu etcd_cpu list_bytes list_items
  eval "$(run_measured "$work/list.out" "$work/list.err" python3 "$work/list.py" "$KUBECONFIG" "$chunk")"
  [[ "$status" == 0 ]] || { cat "$work/list.err" >&2; fail "the bare LIST failed"; }
  read -r list_bytes list_items <"$work/list.out"
  echo "  bare paged LIST (limit $chunk): $list_items objects, $list_bytes bytes ($((list_bytes / list_items)) per object), wall $wall s (reader CPU $user + $sys s); kube-apiserver $apiserver_cpu CPU s, etcd $etcd_cpu CPU s"
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== creating $first Deployments"
create 0 "$first"
served=$("$kubectl" get --raw /apis/apps/v1/namespaces/scale-0/deployments/svc-000001 |
  jq -c '., del(.metadata.managedFields)' | awk '{printf "%d ", length($0)}')
read -r with_fields without_fields <<<"$served"
echo "  one Deployment as served (compact JSON, last-applied baseline included): $without_fields bytes, $with_fields with managedFields"
measure "$first"
bare_list
echo "== creating $((total - first)) more"
create "$first" "$total"
measure "$total"
bare_list
