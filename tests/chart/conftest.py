"""Fixtures of the chart tests: the real helm and kubectl from <repo>/.tools/bin (installed by
`.ci/install-tools`), chart rendering, and the real agent binary built by cargo."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "drift-sentinel"
TESTS = Path(__file__).resolve().parent
TOOLS_BIN = Path(os.environ.get("DRIFT_SENTINEL_TOOLS_BIN", REPO / ".tools" / "bin"))
HELM = TOOLS_BIN / "helm"
KUBECTL = TOOLS_BIN / "kubectl"
RELEASE = "ds"
NAMESPACE = "drift-sentinel"
FULLNAME = "ds-drift-sentinel"


def _require(tool: Path) -> str:
    if not os.access(tool, os.X_OK):
        raise RuntimeError(f"{tool} is missing: run `bash .ci/install-tools` first")
    return str(tool)


@pytest.fixture(scope="session")
def helm() -> str:
    return _require(HELM)


@pytest.fixture(scope="session")
def kubectl() -> str:
    return _require(KUBECTL)


def run_helm(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HELM_CACHE_HOME": "/tmp/drift-sentinel-helm/cache",
                "HELM_CONFIG_HOME": "/tmp/drift-sentinel-helm/config",
                "HELM_DATA_HOME": "/tmp/drift-sentinel-helm/data", **(env or {})}
    full_env.setdefault("KUBECONFIG", os.devnull)
    out = subprocess.run([_require(HELM), *args], capture_output=True, text=True, timeout=120, env=full_env)
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out


def render_text(*args: str, values: list[Path | str] = (), sets: list[str] = (),
                release: str = RELEASE, namespace: str = NAMESPACE, env: dict | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["template", release, str(CHART), "--namespace", namespace]
    for v in values:
        cmd += ["--values", str(v)]
    for s in sets:
        cmd += ["--set", s]
    return run_helm(*cmd, *args, env=env, check=check)


def render(*args: str, **kwargs) -> list[dict]:
    """The rendered documents, parsed (empty documents dropped)."""
    out = render_text(*args, **kwargs)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def is_audit(doc: dict) -> bool:
    """The audit's objects (its Deployment, ServiceAccount and RBAC) carry the component label
    `audit`."""
    return (doc.get("metadata", {}).get("labels") or {}).get("app.kubernetes.io/component") == "audit"


def find(docs: list[dict], kind: str, name: str | None = None) -> dict:
    """The one document of `kind` (and `name`). Without a name, the audit's objects are left out:
    the webhook's Deployment, ServiceAccount, ClusterRole … are the ones meant (find the audit's
    by name, `<fullname>-audit`)."""
    matches = [d for d in docs if d["kind"] == kind and
               (d["metadata"]["name"] == name if name is not None else not is_audit(d))]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def admission_hook(docs: list[dict]) -> dict:
    """The admission webhook (the configuration also holds the rule webhook)."""
    hooks = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    (hook,) = [h for h in hooks if h["name"] == "validate.drift-sentinel.k8s.io"]
    return hook


def validate_k8s(doc: dict, version: str) -> None:
    """`doc` against the Kubernetes schemas of `version`, strictly. The chart renders the rule
    webhook's matchConditions only for Kubernetes 1.28+ (test_chart_rules checks both renders);
    a document rendered for the default version is checked against older schemas without them."""
    import copy as _copy

    import kubernetes_validate as _kv
    if doc.get("kind") == "ValidatingWebhookConfiguration" and \
            tuple(int(p) for p in version.split(".")[:2]) < (1, 28):
        doc = _copy.deepcopy(doc)
        for hook in doc["webhooks"]:
            if hook["name"] == "rules.drift-sentinel.k8s.io":
                hook.pop("matchConditions", None)
    _kv.validate(doc, version, strict=True)


def find_all(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def with_record_key(docs: list[dict], args: list[str], directory) -> list[str]:
    """`args` with the record signing key's Secret projected as the kubelet would (its seed's 32
    bytes in `directory`/record-key/seed) and `--record-signing-key` pointing there."""
    secrets = [s for s in find_all(docs, "Secret") if s["metadata"]["name"].endswith("-record-key")]
    if not secrets:
        return args
    (secret,) = secrets
    (directory / "record-key").mkdir(parents=True, exist_ok=True)
    (directory / "record-key" / "seed").write_bytes(base64.b64decode(secret["data"]["seed"]))
    return [a.replace("--record-signing-key=/record-key/", f"--record-signing-key={directory}/record-key/")
            for a in args]


def tls_secrets(docs: list[dict]) -> list[dict]:
    """The rendered TLS Secrets (the record signing key's Secret is another)."""
    return [d for d in find_all(docs, "Secret") if d.get("type") == "kubernetes.io/tls"]


def tls_secret(docs: list[dict]) -> dict:
    """The one rendered TLS Secret: the webhook's serving certificate and its CA."""
    (secret,) = tls_secrets(docs)
    return secret


def tls_material(docs: list[dict]) -> dict:
    """PEM texts of the rendered Secret and the caBundle."""
    secret = tls_secret(docs)
    webhook = find(docs, "ValidatingWebhookConfiguration")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    data["caBundle"] = base64.b64decode(webhook["webhooks"][0]["clientConfig"]["caBundle"]).decode()
    return data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the agent ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def agent_binary() -> Path:
    """`cargo build -p drift-sentinel` (waits on cargo's lock if another build runs), then the
    path cargo reports for the binary."""
    out = subprocess.run(
        ["cargo", "build", "--locked", "-p", "drift-sentinel", "--bin", "drift-sentinel", "--message-format=json"],
        cwd=REPO, capture_output=True, text=True, timeout=3000,
    )
    if out.returncode != 0:
        raise RuntimeError(f"cargo build failed:\n{out.stderr[-4000:]}")
    for line in out.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and \
                msg["target"]["name"] == "drift-sentinel":
            return Path(msg["executable"])
    raise RuntimeError("cargo did not report the drift-sentinel executable")


class Agent:
    """The real agent on loopback, serving HTTPS with the chart's certificate."""

    def __init__(self, binary: Path, workdir: Path, rules: list[Path], tls: dict, service: str):
        self.port = free_port()
        self.admin_port = free_port()
        self.tls = tls
        self.service = service
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "tls.crt").write_text(tls["tls.crt"])
        (workdir / "tls.key").write_text(tls["tls.key"])
        args = [str(binary)]
        for r in rules:
            args += ["--rules", str(r)]
        args += ["--address", f"127.0.0.1:{self.port}", "--admin-address", f"127.0.0.1:{self.admin_port}",
                 "--tls-cert-file", str(workdir / "tls.crt"), "--tls-key-file", str(workdir / "tls.key")]
        self.log = open(workdir / "agent.log", "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_SENTINEL_")}
        env.pop("KUBECONFIG", None)
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.context = ssl.create_default_context(cadata=tls["caBundle"])
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"agent exited with {self.process.returncode}: {self.logs()}")
            try:
                if self.https("GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent not ready within 30 s: {self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def https(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
              server_name: str | None = None):
        """A request over HTTPS trusting only the chart's CA, checking the certificate against
        `server_name` (default: the Service's `<svc>.<ns>.svc`, as the API server does)."""
        name = server_name or self.service
        conn = http.client.HTTPSConnection(name, self.port, context=self.context, timeout=10)
        conn._create_connection = lambda addr, *a, **k: socket.create_connection(("127.0.0.1", self.port), *a, **k)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def review(self, review: dict) -> dict:
        code, body = self.https("POST", "/validate", json.dumps(review).encode(),
                                {"Content-Type": "application/json"})
        assert code == 200, body
        answer = json.loads(body)
        assert answer["response"]["uid"] == review["request"]["uid"]
        return answer["response"]

    def status(self) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=10)
        try:
            conn.request("GET", "/status")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@contextlib.contextmanager
def running_agent(binary: Path, workdir: Path, rules: list[Path], tls: dict,
                  service: str = f"{FULLNAME}.{NAMESPACE}.svc"):
    agent = Agent(binary, workdir, rules, tls, service)
    try:
        yield agent
    finally:
        agent.stop()
