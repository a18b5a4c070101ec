#!/usr/bin/env bash
# The audit at scale (reference §8 step 5): realistic Deployments (~10 KB each, last-applied baseline
# included) in a real kube-apiserver (no controller manager: no ReplicaSets, no Pods), one
# `drift-sentinel audit --once` run at 1,000 and at 10,000 objects; prints the wall time of
# each run and the audit process's peak RSS (VmHWM, read from /proc/PID/status while it runs).
#
#   scripts/audit-scale.sh [TOTAL] [FIRST]     (defaults 10000 and 1000)
#
# Needs the control plane (`bash .ci/build-cluster`) and builds the release binary and the
# testkit's `cluster` example. Everything it starts stops when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
total="${1:-10000}"
first="${2:-1000}"
per_namespace=1000

cargo build --release -p drift-sentinel --quiet
cargo build -p drift-testkit --example cluster --quiet
target="${CARGO_TARGET_DIR:-target}"
work="$(mktemp -d)"
stop="$work/stop"
cleanup() {
  touch "$stop"
  sleep 3
  rm -rf "$work"
}
trap cleanup EXIT

"$target/debug/examples/cluster" "$stop" --no-controller-manager >"$work/cluster.out" 2>"$work/cluster.err" &
for _ in $(seq 1 120); do
  grep -q '^KUBECONFIG=' "$work/cluster.out" 2>/dev/null && break
  sleep 1
done
export KUBECONFIG="$(sed -n 's/^KUBECONFIG=//p' "$work/cluster.out")"
kubectl="$(sed -n 's/^KUBECTL=//p' "$work/cluster.out")"
[[ -n "$KUBECONFIG" ]] || { echo "the control plane did not start" >&2; cat "$work/cluster.err" >&2; exit 1; }

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

# Writes Deployments [from, to) as Lists of 250 to $work/batch-*.yaml.
generate() {
  python3 - "$work" "$1" "$2" "$per_namespace" <<'PY'
import json, sys
work, start, end, per_ns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def deployment(i):
    name = f"svc-{i:05d}"
    ns = f"scale-{i // per_ns}"
    env = [{"name": f"SETTING_{k:02d}", "value": f"value-{k:02d}-" + "x" * 30} for k in range(12)]
    container = lambda n, image: {
        "name": n, "image": image, "env": env if n == "app" else env[:5],
        "ports": [{"containerPort": (8080 if n == "app" else 9080) + j, "name": f"{n[:2]}{j}"} for j in range(3)],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080 if n == "app" else 9080}, "periodSeconds": 5},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"app": name, "team": f"team-{i % 17}", "tier": "backend"},
                     "annotations": {"owner": "platform@example.com", "description": "a realistic service " * 3}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name, "team": f"team-{i % 17}"}},
                              "spec": {"containers": [container("app", f"registry.example/{name}:1.0"),
                                                      container("proxy", "registry.example/proxy:2.1")],
                                       "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}]}}},
    }
batch, n = [], 0
def flush():
    global batch, n
    if batch:
        with open(f"{work}/batch-{n:04d}.yaml", "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": batch}, f)
        n += 1
        batch = []
for i in range(start, end):
    batch.append(deployment(i))
    if len(batch) == 250:
        flush()
flush()
PY
}

create() {
  local from="$1" to="$2"
  rm -f "$work"/batch-*.yaml
  for ns in $(seq $((from / per_namespace)) $(((to - 1) / per_namespace))); do
    "$kubectl" create namespace "scale-$ns" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  done
  generate "$from" "$to"
  for batch in "$work"/batch-*.yaml; do
    "$kubectl" create --save-config -f "$batch" 2>&1 >/dev/null | { grep -v '^Warning:' || true; } >&2
  done
  # Some drift: every 100th object gets a new image by hand.
  for i in $(seq "$from" 100 $((to - 1))); do
    printf -v name 'svc-%05d' "$i"
    "$kubectl" -n "scale-$((i / per_namespace))" set image "deployment/$name" "app=registry.example/$name:9.9" >/dev/null
  done
}

# Runs one audit and prints objects, seconds and peak RSS.
measure() {
  local label="$1"
  local start end pid peak=0 rss status
  start=$(date +%s.%N)
  "$target/release/drift-sentinel" audit --once --rules "$work/rules" --kubeconfig "$KUBECONFIG" \
    --audit-reports none >"$work/out-$label.txt" 2>"$work/err-$label.txt" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [[ -n "$rss" && "$rss" -gt "$peak" ]] && peak="$rss"
    sleep 0.05
  done
  status=0
  wait "$pid" || status=$?
  end=$(date +%s.%N)
  python3 -c 'import sys; l, summary, status, start, end, peak = sys.argv[1:]; print(f"{l}: {summary}\n  exit {status}, {float(end) - float(start):.1f} s, peak RSS {int(peak)} KiB ({int(peak) / 1024:.1f} MiB)")' \
    "$label" "$(tail -1 "$work/out-$label.txt")" "$status" "$start" "$end" "$peak"
}

generate 0 1
size=$(python3 -c "import json, sys; print(len(json.dumps(json.load(open(sys.argv[1]))['items'][0])))" "$work/batch-0000.yaml")
echo "one Deployment as written: $size bytes (the stored object adds the last-applied baseline)"

echo "== creating $first Deployments"
create 0 "$first"
stored=$("$kubectl" -n scale-0 get deploy svc-00001 -o json | wc -c)
echo "one Deployment as served (with its last-applied baseline, without managedFields): $stored bytes"
measure "$first"
echo "== creating $((total - first)) more"
create "$first" "$total"
measure "$total"
