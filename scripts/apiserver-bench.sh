#!/usr/bin/env bash
# What an UPDATE waits for through a real kube-apiserver, with and without the webhook
# (bench/examples/apiserver_bench): 40 realistic Deployments applied with kubectl apply, then
# UPDATEs as client-side `kubectl apply` sends them (merge patches with the change and the new
# last-applied-configuration; half image edits, allowed; half replicas edits, denied) at 50/s
# and at the highest rate this machine sustains (MAX_FRACTION, 0.5, × the closed-loop rate
# without a webhook), from 8 keep-alive clients, in rotating rounds over four setups: no
# webhook; the floor (drift-floor: reads the body, finds the uid, allows) by URL over TLS, what
# any webhook costs at the least; the agent by URL over TLS; the agent with client
# authentication (--client-ca-file, the API server presenting its webhook client certificate).
#
# Prints each phase, then a table of medians: client UPDATE p50/p99 (and the difference to no
# webhook), the API server's own apiserver_admission_webhook_admission_duration_seconds p50/p99
# for the webhook, the agent's CPU per webhook call and its peak RSS; then every round pooled,
# with what each setup adds to no webhook and to the floor and a 90 % interval from drawing the
# rounds again, and each server's CPU per call over all its rounds (finer than one round's). Many short rounds narrow the intervals more than a few long ones (about 13
# minutes with the defaults).
#
#   scripts/apiserver-bench.sh
#
# BASELINE=PATH adds a fifth setup: another build of the agent (say, of the commit before a
# change), run as the agent is; the pooled table then ends with what the agent adds over it.
#
# Environment: ROUNDS=12 PHASE_SECONDS=6 CLIENTS=8 RATES=50,max MAX_FRACTION=0.5 DEPLOYMENTS=40 BUILD=1
# BASELINE (unset: no fifth setup) WEBHOOK_HOST (unset: this machine's address on its default
# route, where the API server calls webhooks over HTTP/1.1 as in a cluster; at a loopback
# address it calls them over HTTP/2)
# Needs the control plane (`bash .ci/build-cluster`, built into .tools/cluster). Everything it
# starts stops when it ends. Timings on a shared machine swing: compare within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .tools/cluster/kube-apiserver ]] || { echo "the control plane is missing: run bash .ci/build-cluster" >&2; exit 2; }
if [[ "${BUILD:-1}" == 1 ]]; then
  echo "building release binaries..." >&2
  cargo build --release -p drift-sentinel -p drift-bench --bins --example apiserver_bench --quiet
fi
bin="${CARGO_TARGET_DIR:-target}/release"
work="$(mktemp -d "${TMPDIR:-/tmp}/apiserver-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "apiserver-bench: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/examples/apiserver_bench" "$bin/drift-sentinel" "$bin/drift-floor" "$work"
