#!/usr/bin/env python3
"""Soak benchmark of the release agent (issue 13). Not a CI test: run it by hand (scripts/soak.sh).

Starts the real release binary offline (``--rules`` file, ``--connection`` file, HTTPS, admission
violation export on, the demonstration reader consuming the channel directory) and, for
SOAK_SECONDS (default 600), sends it mixed traffic from SOAK_CLIENTS keep-alive clients at a
paced SOAK_RATE requests per second in total:

  allowed    an UPDATE that changes only a mutable field            -> allowed, no violation
  denied     an image change in an enforce namespace                -> 403, one record
  warned     the same in a warn namespace                           -> allowed + warning, one record
  dryrun     the same in a dry-run namespace                        -> allowed, one record
  large      ~2 MiB review, 20,000 changed env entries (enforce)    -> 403 within 64 KiB, one record
  malformed  not JSON (HTTP 400), or a review without request (code 400)

Meanwhile the rule file is rewritten in place every second (truncated, then written in two
halves with a pause, alternating between two texts of the same rules: the agent must keep the
rules it had while the file is half-written), and the TLS pair (a new key and a new leaf signed by
the same CA) is rotated every 30 s (written in place, as a Secret volume update does not, to be
hard). Clients reconnect every 100 requests, so new handshakes see the new pairs.

Every minute it prints: requests, errors, p50/p99 latency, the agent's RSS (the median of
samples every half second, and the largest), distinct server
certificates seen. At the end: errors, RSS flatness (last minute within 10 % of the second),
and violations sent vs records published + dropped (from /metrics) vs records the reader
consumed plus those still on disk. Exit status 0 only when all three goals hold.
"""

import http.client
import json
import os
import random
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict

BINARY = sys.argv[1]
SECONDS = int(os.environ.get("SOAK_SECONDS", "600"))
RATE = float(os.environ.get("SOAK_RATE", "100"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "4"))
ROTATE_TLS = float(os.environ.get("SOAK_TLS_PERIOD", "30"))
REWRITE_RULES = float(os.environ.get("SOAK_RULES_PERIOD", "1"))

work = tempfile.mkdtemp(prefix="drift-soak-")
channel_root = os.path.join(work, "export")
channel = os.path.join(channel_root, "audit-channel")


def sh(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# --- TLS: one CA, leaves rotated ------------------------------------------------------------
ca_key, ca_crt = os.path.join(work, "ca.key"), os.path.join(work, "ca.crt")
sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
   "-keyout", ca_key, "-out", ca_crt, "-days", "2", "-subj", "/CN=soak-ca")
cert_file, key_file = os.path.join(work, "tls.crt"), os.path.join(work, "tls.key")
ext_file = os.path.join(work, "ext.cnf")
with open(ext_file, "w") as f:
    f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
rotations = 0


def new_pair(in_place):
    """A new key and leaf; written in place (truncate + write) when in_place."""
    global rotations
    key, csr, crt = (os.path.join(work, n) for n in ("new.key", "new.csr", "new.crt"))
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    sh("openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
       "-out", crt, "-days", "1", "-extfile", ext_file)
    for src, dst in ((crt, cert_file), (key, key_file)):
        data = open(src, "rb").read()
        if in_place:
            with open(dst, "wb") as f:
                f.write(data)
        else:
            os.replace(src, dst)
    rotations += 1


new_pair(False)

# --- Rules ----------------------------------------------------------------------------------
RULES = """apiVersion: v1
kind: ConfigMap
metadata:
  name: soak-{name}
  namespace: drift-sentinel
  annotations: {{drift-sentinel.k8s.io/rule: "true"}}
data:
  spec: |
    # {comment}
    mode: {mode}
    priority: {priority}
    namespaces: ["{ns}"]
    selectors: [{{apiGroup: apps, kind: Deployment}}]
    mutable: ["spec.replicas", "metadata.annotations"]
"""


def rules_text(variant):
    docs = [
        RULES.format(name="enforce", mode="enforce", priority=30, ns="prod-*", comment=variant),
        RULES.format(name="warn", mode="warn", priority=20, ns="staging-*", comment=variant),
        RULES.format(name="dryrun", mode="dry-run", priority=10, ns="dry-*", comment=variant),
    ]
    return "---\n".join(docs)


rules_file = os.path.join(work, "rules.yaml")
with open(rules_file, "w") as f:
    f.write(rules_text("first"))
rule_rewrites = 0

connection_file = os.path.join(work, "connection.yaml")
with open(connection_file, "w") as f:
    f.write("apiVersion: connection.drift-sentinel.io/v1alpha1\nkind: Connection\n"
            "metadata: {name: audit-connection}\n"
            f"spec: {{driver: disk, config: {{path: {channel_root}}}}}\n")


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


port, admin = free_port(), free_port()
agent_log = open(os.path.join(work, "agent.log"), "w")
agent = subprocess.Popen(
    [BINARY, "serve", "--rules", rules_file, "--address", f"127.0.0.1:{port}",
     "--admin-address", f"127.0.0.1:{admin}", "--tls-cert-file", cert_file,
     "--tls-key-file", key_file, "--enable-admission-violation-export",
     "--connection", connection_file, "--reload-interval", "1s", "--log-level", "WARN"],
    stdout=agent_log, stderr=agent_log)
reader_out = open(os.path.join(work, "reader.out"), "w")
reader = None

context = ssl.create_default_context(cafile=ca_crt)


def connect():
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)


for _ in range(100):
    try:
        c = connect()
        c.request("GET", "/readyz")
        if c.getresponse().status == 200:
            break
    except Exception:
        pass
    time.sleep(0.2)
else:
    print("the agent did not become ready", file=sys.stderr)
    agent.kill()
    print(open(os.path.join(work, "agent.log")).read(), file=sys.stderr)
    sys.exit(1)

os.makedirs(channel, exist_ok=True)
reader = subprocess.Popen([BINARY, "reader", "--path", channel, "--interval", "1s"],
                          stdout=reader_out, stderr=subprocess.DEVNULL)


# --- Traffic --------------------------------------------------------------------------------
def deployment(image, replicas, env=None):
    container = {"name": "app", "image": image}
    if env is not None:
        container["env"] = env
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [container]}}}}


def review(uid, namespace, old, new):
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "name": "web", "namespace": namespace, "operation": "UPDATE",
        "userInfo": {"username": "soak"}, "object": new, "oldObject": old}}).encode()


big_old = deployment("app:1", 2, [{"name": f"V{i}", "value": "a" * 40} for i in range(20000)])
big_new = deployment("app:1", 2, [{"name": f"V{i}", "value": "b" * 40} for i in range(20000)])
LARGE = review("UID", "prod-large", big_old, big_new)  # uid patched per request
KINDS = ["allowed"] * 40 + ["denied"] * 20 + ["warned"] * 15 + ["dryrun"] * 15 + \
        ["malformed"] * 8 + ["large"] * 2


def body_for(kind, uid):
    old = deployment("app:1", 2)
    if kind == "allowed":
        return review(uid, "prod-a", old, deployment("app:1", 3))
    if kind == "denied":
        return review(uid, "prod-a", old, deployment("app:2", 2))
    if kind == "warned":
        return review(uid, "staging-a", old, deployment("app:2", 2))
    if kind == "dryrun":
        return review(uid, "dry-a", old, deployment("app:2", 2))
    if kind == "large":
        return LARGE.replace(b'"uid": "UID"', f'"uid": "{uid}"'.encode(), 1)
    if uid.endswith(("0", "2", "4", "6", "8")):
        return b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionRev'
    return b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}'


lock = threading.Lock()
latencies = defaultdict(list)  # minute -> seconds
errors = defaultdict(int)  # minute -> count
error_samples = []
sent = defaultdict(int)
violations_sent = 0
certs_seen = set()
start = time.monotonic()
stop = threading.Event()


def check(kind, uid, status, body):
    """The answer expected for kind; returns (ok, is_violation)."""
    if kind == "malformed" and status == 400:
        return True, False
    if status != 200:
        return False, False
    doc = json.loads(body)
    r = doc["response"]
    if r["uid"] != ("" if kind == "malformed" else uid):
        return False, False
    violation = "denied-paths" in r.get("auditAnnotations", {})
    if kind == "malformed":
        return (not r["allowed"] and r["status"]["code"] == 400), False
    if kind == "allowed":
        return r["allowed"] and not violation, False
    if kind in ("denied", "large"):
        ok = not r["allowed"] and r["status"]["code"] == 403 and violation and len(body) <= 65536
        return ok, violation
    if kind == "warned":
        return r["allowed"] and violation and bool(r.get("warnings")), violation
    if kind == "dryrun":
        return r["allowed"] and violation and not r.get("warnings"), violation
    return False, False


def client(index):
    global violations_sent
    rng = random.Random(index)
    conn, used, n = None, 0, 0
    interval = CLIENTS / RATE
    due = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now - start >= SECONDS:
            break
        if due > now:
            time.sleep(due - now)
        due += interval
        kind = rng.choice(KINDS)
        n += 1
        uid = f"c{index}-{n}"
        body = body_for(kind, uid)
        minute = int((time.monotonic() - start) // 60)
        t0 = time.monotonic()
        try:
            if conn is None or used >= 100:
                if conn is not None:
                    conn.close()
                conn, used = connect(), 0
                conn.connect()
                der = conn.sock.getpeercert(binary_form=True)
                with lock:
                    certs_seen.add(hash(der))
            used += 1
            conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            elapsed = time.monotonic() - t0
            ok, violation = check(kind, uid, resp.status, data)
        except Exception as e:  # a connection error is an error
            elapsed, ok, violation = time.monotonic() - t0, False, False
            data = repr(e).encode()
            resp = None
            conn = None
        with lock:
            sent[kind] += 1
            latencies[minute].append(elapsed)
            if violation:
                violations_sent += 1
            if not ok:
                errors[minute] += 1
                if len(error_samples) < 10:
                    error_samples.append((kind, getattr(resp, "status", None), data[:300]))


def rss_kib():
    try:
        for line in open(f"/proc/{agent.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return -1
    return -1


def rewrite_rules():
    global rule_rewrites
    i = 0
    while not stop.wait(REWRITE_RULES):
        i += 1
        text = rules_text(f"rewrite {i}" + " " * (i % 2))
        with open(rules_file, "w") as f:  # truncate in place: an empty file for a moment
            f.write(text[: len(text) // 2])
            f.flush()
            time.sleep(0.05)
            f.write(text[len(text) // 2:])
        rule_rewrites += 1


def rotate_tls():
    while not stop.wait(ROTATE_TLS):
        new_pair(True)


threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
helpers = [threading.Thread(target=rewrite_rules), threading.Thread(target=rotate_tls)]
for t in threads + helpers:
    t.start()

# RSS is sampled every half second: a minute's figure is the median of its samples (a single
# sample lands at random on the transient peak of a large review in flight); its largest
# sample is printed beside it.
rss = {}
print(f"soak: {SECONDS} s, {RATE:g} req/s from {CLIENTS} clients, work dir {work}", flush=True)
print("minute  requests  errors  p50_ms  p99_ms  rss_mib  rss_max  certs_seen", flush=True)
minute = 0
while minute * 60 < SECONDS:
    target = start + (minute + 1) * 60
    samples = []
    while time.monotonic() < min(target, start + SECONDS):
        time.sleep(0.5)
        samples.append(rss_kib())
    samples = sorted(samples) or [rss_kib()]
    rss[minute] = samples[len(samples) // 2]
    with lock:
        lat = sorted(latencies[minute])
        errs = errors[minute]
        seen = len(certs_seen)
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
    print(f"{minute + 1:>6}  {len(lat):>8}  {errs:>6}  {p(0.5):>6.1f}  {p(0.99):>6.1f}  "
          f"{rss[minute] / 1024:>7.1f}  {samples[-1] / 1024:>7.1f}  {seen:>10}", flush=True)
    minute += 1

for t in threads:
    t.join()
stop.set()
for t in helpers:
    t.join()


def metrics():
    c = connect()
    c.request("GET", "/metrics")
    return c.getresponse().read().decode()


def metric_sum(text, name, source="webhook"):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and f'source="{source}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


# Let the export queue drain and the open segment complete (1 minute at most), and the reader
# consume it.
deadline = time.monotonic() + 90
while True:
    text = metrics()
    published = metric_sum(text, "drift_sentinel_export_records_published_total")
    dropped = metric_sum(text, "drift_sentinel_export_records_dropped_total")
    if published + dropped >= violations_sent or time.monotonic() > deadline:
        break
    time.sleep(1)
drop_lines = [l for l in text.splitlines()
              if l.startswith("drift_sentinel_export_records_dropped_total") and not l.endswith(" 0")]
time.sleep(65)  # the last segment ages out (1 minute) and the reader takes it
reader.send_signal(signal.SIGTERM)
reader.wait(timeout=10)
reader_out.close()
consumed = sum(1 for line in open(os.path.join(work, "reader.out"))
               if '"eventType":"violation_admission"' in line)
on_disk = 0
for name in os.listdir(channel):
    if name.startswith("admission-"):
        with open(os.path.join(channel, name), "rb") as f:
            on_disk += sum(1 for line in f if line.strip())
agent.send_signal(signal.SIGTERM)
agent_exit = agent.wait(timeout=30)
agent_log.close()
warns = [l for l in open(os.path.join(work, "agent.log")) if '"level":"ERROR"' in l]

total_errors = sum(errors.values())
second, last = rss.get(1, -1), rss.get(max(rss), -1)
flat = second > 0 and abs(last - second) <= 0.10 * second
accounted = violations_sent == published + dropped == consumed + on_disk + dropped
print()
print(f"requests sent: {sum(sent.values())} ({', '.join(f'{k} {v}' for k, v in sorted(sent.items()))})")
print(f"rule file rewrites: {rule_rewrites}; TLS rotations: {rotations - 1}; "
      f"distinct server certificates seen: {len(certs_seen)}")
print(f"errors: {total_errors}")
for sample in error_samples:
    print(f"  e.g. {sample}")
print(f"RSS: second minute {second / 1024:.1f} MiB, last minute {last / 1024:.1f} MiB "
      f"({(last - second) / max(second, 1) * 100:+.1f} %): {'flat' if flat else 'NOT FLAT'}")
print(f"violations sent: {violations_sent}; records published {published} + dropped {dropped} "
      f"= {published + dropped}; reader consumed {consumed} + left on disk {on_disk}")
for line in drop_lines:
    print(f"  {line}")
print(f"agent: exit status {agent_exit} after SIGTERM; ERROR log lines: {len(warns)}")
for line in warns[:5]:
    print(f"  {line.strip()[:300]}")
ok = total_errors == 0 and flat and accounted and agent_exit == 0
print("soak:", "PASS" if ok else "FAIL", f"(work dir {work})")
sys.exit(0 if ok else 1)
