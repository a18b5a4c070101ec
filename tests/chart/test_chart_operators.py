"""What operators of Kyverno's and Gatekeeper's charts expect (reference §10, issue 14), rendered with the
real helm: matchConditions, cert-manager, ServiceMonitor, PrometheusRule, the Grafana dashboard,
NetworkPolicy, priority, topology spread, replicas, the README's values table and the NOTES.
Documents of cert-manager's and the Prometheus Operator's kinds are validated against their CRDs
(operator_kinds.py), the built-in ones with kubernetes-validate. The metric names that the
dashboard and the alerts use are checked against the /metrics of the real agent binary."""

from __future__ import annotations

import base64
import copy
import http.client
import importlib.util
import json
import os
import re
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import kubernetes_validate
import pydantic
import pytest
import yaml

import operator_kinds
from conftest import validate_k8s, admission_hook, is_audit, CHART, FULLNAME, NAMESPACE, REPO, find, find_all, free_port, render, render_text, run_helm, \
    tls_material, tls_secrets, with_record_key

K8S_VERSIONS = ["1.28.0", kubernetes_validate.latest_version()]
CM = ["certManager.enabled=true"]
MONITORING = ["metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
              "metrics.grafanaDashboard.enabled=true"]
DASHBOARD = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
ARGOCD = "!(request.userInfo.username == 'system:serviceaccount:argocd:argocd-application-controller')"
# The audit's metrics (reference §8), served by the audit process (`drift-sentinel audit`, the chart's
# audit Deployment) rather than the webhook: checked against its real /metrics below.
AUDIT_METRICS = [
    "drift_sentinel_audit_last_run_timestamp_seconds",
    "drift_sentinel_audit_duration_seconds",
    "drift_sentinel_audit_objects",
    "drift_sentinel_audit_drifted_objects",
    "drift_sentinel_audit_bypassed_objects",
    "drift_sentinel_audit_bypass_oldest_seconds",
    "drift_sentinel_audit_unverified_records",
]
AUDIT_FIXTURES = REPO / "agent" / "tests" / "fixtures" / "audit"
AUDIT = f"{FULLNAME}-audit"
REFERENCE = REPO / "docs" / "reference.md"


def validate(docs: list[dict], versions=K8S_VERSIONS) -> set[tuple[str, str]]:
    """Every document: cert-manager's and the Prometheus Operator's kinds against their CRDs,
    the others (all built-in here) against the Kubernetes schemas, strictly. The kinds seen."""
    seen = set()
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        seen.add(key)
        if key in operator_kinds.MODELS:
            operator_kinds.validate(doc)
        else:
            for version in versions:
                validate_k8s(doc, version)
    return seen


def hook_of(docs):
    hook = admission_hook(docs)
    return hook


def pod_of(docs):
    return find(docs, "Deployment")["spec"]["template"]["spec"]


# --- the operator-kind validation can fail ---------------------------------------------------------


def test_operator_kind_validation_fails_on_unknown_fields_and_wrong_values(helm):
    docs = render(sets=CM + MONITORING)
    monitor = find(docs, "ServiceMonitor")
    operator_kinds.validate(monitor)
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["tlsConfig"]["insecureSkipVerfy"] = True
    with pytest.raises(operator_kinds.UnknownField, match="insecureSkipVerfy"):
        operator_kinds.validate(typo)
    scheme = copy.deepcopy(monitor)
    scheme["spec"]["endpoints"][0]["scheme"] = "ftp"
    with pytest.raises(pydantic.ValidationError):
        operator_kinds.validate(scheme)
    cert = copy.deepcopy(find(docs, "Certificate", FULLNAME))
    del cert["spec"]["secretName"]
    with pytest.raises(pydantic.ValidationError):
        operator_kinds.validate(cert)
    rule = copy.deepcopy(find(docs, "PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["fore"] = "5m"
    with pytest.raises(operator_kinds.UnknownField, match="fore"):
        operator_kinds.validate(rule)


# --- matchConditions --------------------------------------------------------------------------------


def test_match_conditions_are_absent_by_default(helm):
    assert "matchConditions" not in hook_of(render())


def test_match_conditions_skip_a_named_service_account(helm):
    docs = render("--set-json", "webhook.matchConditions=" + json.dumps([{"name": "not-argocd", "expression": ARGOCD}]))
    hook = hook_of(docs)
    assert hook["matchConditions"] == [{"name": "not-argocd", "expression": ARGOCD}]
    validate(docs)
    # The documented example is this one.
    assert "system:serviceaccount:argocd:argocd-application-controller" in (REPO / "docs" / "install.md").read_text()


def test_match_conditions_need_kubernetes_1_28(helm):
    cond = "webhook.matchConditions=" + json.dumps([{"name": "a", "expression": "true"}])
    old = render_text("--kube-version", "1.27.0", "--set-json", cond, check=False)
    assert old.returncode != 0
    assert "webhook.matchConditions needs Kubernetes 1.28 or newer (the API server is v1.27.0)" in old.stderr
    docs = render("--kube-version", "1.28.0", "--set-json", cond)
    assert hook_of(docs)["matchConditions"] == [{"name": "a", "expression": "true"}]
    # Without conditions, 1.25 renders as before.
    render("--kube-version", "1.25.0")


# --- cert-manager -------------------------------------------------------------------------------------


def test_cert_manager_renders_its_own_ca_chain_and_no_render_time_secret(helm):
    docs = render(sets=CM)
    assert not tls_secrets(docs), "no render-time certificate with certManager.enabled"
    issuers = {d["metadata"]["name"]: d for d in find_all(docs, "Issuer")}
    certs = {d["metadata"]["name"]: d for d in find_all(docs, "Certificate")}
    assert set(issuers) == {f"{FULLNAME}-selfsigned", f"{FULLNAME}-ca"}
    assert set(certs) == {f"{FULLNAME}-ca", FULLNAME}
    assert issuers[f"{FULLNAME}-selfsigned"]["spec"] == {"selfSigned": {}}
    ca = certs[f"{FULLNAME}-ca"]["spec"]
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == f"{FULLNAME}-selfsigned"
    assert ca["duration"] == f"{3650 * 24}h"
    assert issuers[f"{FULLNAME}-ca"]["spec"] == {"ca": {"secretName": ca["secretName"]}}
    serving = certs[FULLNAME]["spec"]
    assert serving["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": f"{FULLNAME}-ca"}
    assert serving["dnsNames"] == [FULLNAME, f"{FULLNAME}.{NAMESPACE}", f"{FULLNAME}.{NAMESPACE}.svc",
                                   f"{FULLNAME}.{NAMESPACE}.svc.cluster.local"]
    assert "server auth" in serving["usages"]
    assert "app.kubernetes.io/managed-by" not in serving["secretTemplate"]["labels"]
    for doc in list(issuers.values()) + list(certs.values()):
        assert doc["metadata"]["namespace"] == NAMESPACE
    # The pods mount the Secret cert-manager writes, at the directory of tls.certFile.
    pod = pod_of(docs)
    volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == serving["secretName"] == f"{FULLNAME}-tls"
    # The cainjector fills the caBundle from that Certificate; the chart leaves it out.
    vwc = find(docs, "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{FULLNAME}"
    assert "caBundle" not in hook_of(docs)["clientConfig"]
    assert validate(docs) >= {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


def test_cert_manager_with_an_existing_issuer(helm):
    docs = render(sets=CM + ["certManager.issuerRef.name=corp-ca", "certManager.issuerRef.kind=ClusterIssuer"])
    assert not find_all(docs, "Issuer") and not tls_secrets(docs)
    (cert,) = find_all(docs, "Certificate")
    assert cert["spec"]["issuerRef"] == {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca"}
    validate(docs)


# --- ServiceMonitor ------------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_https_webhook_port_with_the_charts_ca(helm):
    docs = render(sets=["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=kps"])
    monitor = find(docs, "ServiceMonitor")
    svc = find(docs, "Service")
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "kps"
    # It selects the chart's Service, in its namespace, by its port's name.
    for key, value in monitor["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"][key] == value
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in svc["spec"]["ports"]]
    assert endpoint["scheme"] == "https" and endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True
    assert endpoint["tlsConfig"] == {"serverName": f"{FULLNAME}.{NAMESPACE}.svc",
                                     "ca": {"secret": {"name": f"{FULLNAME}-cert", "key": "ca.crt"}}}
    # That Secret is the one the chart renders, and it has ca.crt.
    assert "ca.crt" in find(docs, "Secret", f"{FULLNAME}-cert")["data"]
    validate(docs)
    # With cert-manager, the CA comes from cert-manager's Secret; or verification is skipped.
    docs = render(sets=CM + ["metrics.serviceMonitor.enabled=true"])
    assert find(docs, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"]["name"] == f"{FULLNAME}-tls"
    docs = render(sets=["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.insecureSkipVerify=true"])
    assert find(docs, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"] == {"insecureSkipVerify": True}
    validate(docs)


def test_the_audits_service_monitor_scrapes_its_plain_http_port(helm):
    """The audit's metrics are its own process's (the webhook does not serve them): a Service of
    the audit pod for its `http` port and a ServiceMonitor of its own scrape them."""
    assert not [d for d in render() if d["kind"] in ("Service", "ServiceMonitor") and is_audit(d)]
    docs = render(sets=["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=kps",
                        "metrics.serviceMonitor.interval=15s"])
    validate(docs)
    monitor, svc = find(docs, "ServiceMonitor", AUDIT), find(docs, "Service", AUDIT)
    dep = find(docs, "Deployment", AUDIT)
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/component"] == "audit"
    # The ServiceMonitor selects the audit's Service only, and that Service the audit pod only.
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert all(svc["metadata"]["labels"][k] == v for k, v in selector.items())
    webhook_svc = find(docs, "Service")
    assert not all(webhook_svc["metadata"]["labels"].get(k) == v for k, v in selector.items())
    webhook_selector = find(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    assert not all(svc["metadata"]["labels"].get(k) == v for k, v in webhook_selector.items())
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # Plain HTTP on the audit container's `http` port, /metrics; no TLS, no admin port.
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "http", "scheme": "http", "path": "/metrics", "interval": "15s",
                        "scrapeTimeout": "10s", "honorLabels": True}
    (port,) = svc["spec"]["ports"]
    assert port["name"] == "http" and port["targetPort"] == "http"
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert [p["name"] for p in container["ports"]] == ["http"]
    assert f"--address=:{container['ports'][0]['containerPort']}" in container["args"]
    assert 9090 not in [p["port"] for p in svc["spec"]["ports"]]
    # Without the audit, neither.
    docs = render(sets=["metrics.serviceMonitor.enabled=true", "audit.enabled=false"])
    assert not [d for d in docs if d["kind"] in ("Service", "ServiceMonitor") and is_audit(d)]
    assert len(find_all(docs, "ServiceMonitor")) == 1 and len(find_all(docs, "Service")) == 1


# --- PrometheusRule -------------------------------------------------------------------------------------


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def alerts(docs) -> dict[str, dict]:
    rule = find(docs, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_prometheus_rule_alerts_a_team_can_act_on(helm):
    docs = render(sets=["metrics.prometheusRule.enabled=true"])
    validate(docs)
    found = alerts(docs)
    assert set(found) == {"DriftSentinelWebhookSlow", "DriftSentinelDenialBurst", "DriftSentinelExportDropping",
                          "DriftSentinelRulesInvalid", "DriftSentinelAuditNotCompleting",
                          "DriftSentinelBypassWithoutEnd", "DriftSentinelBypassTooOld"}
    expr = {name: " ".join(r["expr"].split()) for name, r in found.items()}
    job = f'job="{FULLNAME}"'
    assert expr["DriftSentinelWebhookSlow"] == (
        f"histogram_quantile(0.99, sum by (le) (rate(drift_sentinel_admission_duration_seconds_bucket{{{job}}}[5m])) ) > 0.5")
    assert expr["DriftSentinelDenialBurst"] == (
        f'sum by (namespace, resource) (rate(drift_sentinel_admission_requests_total{{{job},result="denied"}}[5m])) > 0.1')
    assert "drift_sentinel_export_records_dropped_total" in expr["DriftSentinelExportDropping"]
    assert expr["DriftSentinelRulesInvalid"] == f"max(drift_sentinel_rules_invalid{{{job}}}) > 0"
    last = f'drift_sentinel_audit_last_run_timestamp_seconds{{namespace="{NAMESPACE}"}}'
    # Late, or no audit series at all (the audit pod gone or not scraped).
    assert expr["DriftSentinelAuditNotCompleting"] == f"time() - max({last}) > 180 or absent({last})"
    assert expr["DriftSentinelBypassWithoutEnd"] == (
        f'max(drift_sentinel_audit_bypassed_objects{{namespace="{NAMESPACE}",end="none"}}) > 0')
    assert expr["DriftSentinelBypassTooOld"] == (
        f'max(drift_sentinel_audit_bypass_oldest_seconds{{namespace="{NAMESPACE}"}}) > 604800')
    # Each alert points at its own runbook section of docs/operations.md, which exists.
    anchors = github_anchors((REPO / "docs" / "operations.md").read_text())
    base = "https://github.com/drift-sentinel/drift-sentinel/blob/main/docs/operations.md#"
    for name, r in found.items():
        url = r["annotations"]["runbook_url"]
        assert url == base + name.lower(), url
        assert name.lower() in anchors, f"docs/operations.md has no section {name}"
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        assert r["labels"]["severity"] in ("warning", "critical")
    # Prometheus' template syntax survives Helm's.
    assert "{{ $labels.namespace }}" in found["DriftSentinelDenialBurst"]["annotations"]["description"]


def test_the_audit_alert_only_with_the_audit(helm):
    docs = render(sets=["metrics.prometheusRule.enabled=true", "audit.enabled=false"])
    validate(docs)
    assert "DriftSentinelAuditNotCompleting" not in alerts(docs)
    assert "DriftSentinelBypassWithoutEnd" not in alerts(docs)
    assert "DriftSentinelRulesInvalid" in alerts(docs)


def test_prometheus_rule_thresholds_follow_the_values(helm):
    # --set gives 0.25 as a string, as a user's command line would: the chart takes it.
    docs = render(sets=["metrics.prometheusRule.enabled=true", "metrics.prometheusRule.latencyThresholdSeconds=0.25",
                        "metrics.prometheusRule.denialRateThreshold=2", "metrics.prometheusRule.auditIntervalSeconds=300",
                        "metrics.prometheusRule.runbookBaseUrl=https://wiki.example.com/ops/",
                        "metrics.prometheusRule.bypassMaxAgeSeconds=86400"])
    found = alerts(docs)
    assert found["DriftSentinelWebhookSlow"]["expr"].rstrip().endswith("> 0.25")
    assert found["DriftSentinelDenialBurst"]["expr"].rstrip().endswith("> 2")
    assert " > 900\n" in found["DriftSentinelAuditNotCompleting"]["expr"]
    assert found["DriftSentinelBypassTooOld"]["expr"].rstrip().endswith("> 86400")
    assert found["DriftSentinelRulesInvalid"]["annotations"]["runbook_url"] == \
        "https://wiki.example.com/ops#driftsentinelrulesinvalid"


# --- Grafana dashboard -------------------------------------------------------------------------------


def dashboard_exprs() -> list[str]:
    exprs = []
    for panel in DASHBOARD["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    exprs += [v["query"]["query"] for v in DASHBOARD["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def test_grafana_dashboard_configmap_carries_the_file(helm):
    docs = render(sets=["metrics.grafanaDashboard.enabled=true"])
    cm = find(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert json.loads(cm["data"]["drift-sentinel.json"]) == DASHBOARD
    validate(docs)
    titles = {p["title"] for p in DASHBOARD["panels"]}
    for wanted in ("Decisions by result", "Webhook latency percentiles", "Violations by resource and field",
                   "Records published and dropped", "Audited objects by result", "Drifted objects by rule"):
        assert wanted in titles
    # Every panel queries through the data source variable, and the ids are unique.
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for p in DASHBOARD["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"]


def test_grafana_dashboard_queries_work_with_group_version_resource_labels():
    """The metric label `resource` is `group/version/resource` (reference §10): the kind is taken from
    its last segment, so `apps/v1/deployments` and `v1/pods` both give the plural."""
    (kind_query,) = [e for e in dashboard_exprs() if "label_replace" in e]
    regex = re.search(r'"resource", "([^"]+)"\)', kind_query).group(1)
    for value, plural in (("apps/v1/deployments", "deployments"), ("v1/pods", "pods"),
                          ("argoproj.io/v1alpha1/rollouts", "rollouts"), ("deployments", "deployments")):
        # Prometheus anchors label_replace regexes at both ends.
        assert re.fullmatch(regex, value).group(1) == plural
    for expr in dashboard_exprs():
        assert 'resource="' not in expr, "select resources with =~ on group/version/resource"


# --- metric names against the real agent -----------------------------------------------------------


def referenced_metrics(texts: list[str]) -> set[str]:
    names = set()
    for text in texts:
        for name in re.findall(r"\bdrift_sentinel_[a-z0-9_]+", text):
            names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def test_audit_metrics_list_is_exactly_reference_section_8():
    text = REFERENCE.read_text()
    section = text[text.index("## §8 Audit"):text.index("## §9")]
    spec_names = set(re.findall(r"`(drift_sentinel_audit_[a-z_]+)", section))
    assert sorted(AUDIT_METRICS) == sorted(spec_names)


def agent_metric_families(agent_binary: Path, tmp_path: Path) -> set[str]:
    """Starts the real agent offline, serving HTTPS with the chart's certificate and violation
    export on (so that the export families exist), sends it one AdmissionReview that the default
    rule denies (so that the labelled families appear), and scrapes /metrics as the rendered
    ServiceMonitor says: scheme, path, the CA of the TLS Secret, the Service's DNS name."""
    docs = render(sets=["metrics.serviceMonitor.enabled=true"])
    (endpoint,) = find(docs, "ServiceMonitor")["spec"]["endpoints"]
    tls = tls_material(docs)
    rule = tmp_path / "rule.yaml"
    rule.write_text(render_text("--show-only", "templates/default-rule.yaml").stdout)
    (tmp_path / "tls.crt").write_text(tls["tls.crt"])
    (tmp_path / "tls.key").write_text(tls["tls.key"])
    connection = tmp_path / "connection.yaml"
    connection.write_text(yaml.safe_dump({
        "apiVersion": "connection.drift-sentinel.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": "audit-connection"},
        "spec": {"driver": "disk", "config": {"path": str(tmp_path / "topics")}}}))
    port, admin = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_SENTINEL_") and k != "KUBECONFIG"}
    log = open(tmp_path / "agent.log", "wb")
    process = subprocess.Popen(
        [str(agent_binary), "serve", "--rules", str(rule), "--address", f"127.0.0.1:{port}",
         "--admin-address", f"127.0.0.1:{admin}", "--tls-cert-file", str(tmp_path / "tls.crt"),
         "--tls-key-file", str(tmp_path / "tls.key"), "--enable-admission-violation-export",
         "--connection", str(connection)], stdout=log, stderr=subprocess.STDOUT, env=env)
    context = ssl.create_default_context(cadata=tls["ca.crt"])
    server_name = endpoint["tlsConfig"]["serverName"]

    def request(method, path, body=None):
        conn = http.client.HTTPSConnection(server_name, port, context=context, timeout=10)
        conn._create_connection = lambda addr, *a, **k: socket.create_connection(("127.0.0.1", port), *a, **k)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "agent.log").read_text()
            try:
                if request("GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
            time.sleep(0.05)
        review = json.loads((REPO / "docs" / "examples" / "review.json").read_text())
        review["request"]["uid"] = str(uuid.uuid4())
        code, body = request("POST", "/validate", json.dumps(review).encode())
        assert code == 200 and json.loads(body)["response"]["allowed"] is False, body
        deadline = time.monotonic() + 10
        while True:
            code, text = request("GET", endpoint["path"])
            assert code == 200
            if "drift_sentinel_export_records_published_total{" in text or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
    return families_of(text)


def families_of(text: str) -> set[str]:
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    samples = {re.sub(r"_(bucket|sum|count)$", "", line.split("{")[0].split(" ")[0])
               for line in text.splitlines() if line and not line.startswith("#")}
    assert samples <= families
    return families


def audit_metric_families(agent_binary: Path, tmp_path: Path) -> set[str]:
    """Starts the real audit process as the chart's audit Deployment runs it — the container's
    args, with the rules and objects of files instead of the cluster's (the default rule, the
    fixture dump of agent/tests/fixtures/audit) and loopback addresses — in periodic mode, waits
    for a completed run (/status), and scrapes it where the chart's audit ServiceMonitor does: its
    endpoint's scheme and path, on the container port its Service targets (the one `--address`
    binds, which also serves the probes)."""
    docs = render(sets=["audit.interval=1s", "metrics.serviceMonitor.enabled=true"])
    pod = find(docs, "Deployment", AUDIT)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = [a for a in container["args"]
            if not a.startswith(("--address=", "--last-good-configmap=", "--audit-reports="))]
    assert args[0] == "audit" and "--audit-interval=1s" in args, args
    args = with_record_key(docs, args, tmp_path)
    rule = tmp_path / "rule.yaml"
    rule.write_text(render_text("--show-only", "templates/default-rule.yaml").stdout)
    port, admin = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_SENTINEL_") and k != "KUBECONFIG"}
    log = open(tmp_path / "audit.log", "wb")
    process = subprocess.Popen(
        [str(agent_binary), *args, "--rules", str(rule), "--objects", str(AUDIT_FIXTURES / "deployments.yaml"),
         "--address", f"127.0.0.1:{port}", "--admin-address", f"127.0.0.1:{admin}"],
        stdout=log, stderr=subprocess.STDOUT, env=env)

    def get(port_: int, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port_, timeout=10)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    probe = container["livenessProbe"]["httpGet"]
    assert probe["port"] == "http" and probe.get("scheme", "HTTP") == "HTTP"
    (endpoint,) = find(docs, "ServiceMonitor", AUDIT)["spec"]["endpoints"]
    (service_port,) = find(docs, "Service", AUDIT)["spec"]["ports"]
    assert endpoint["scheme"] == "http" and endpoint["port"] == service_port["name"]
    (container_port,) = [p for p in container["ports"] if p["name"] == service_port["targetPort"]]
    assert f"--address=:{container_port['containerPort']}" in container["args"]
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "audit.log").read_text()
            try:
                code, body = get(admin, "/status")
                if code == 200 and json.loads(body).get("audit", {}).get("lastCompleted"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "audit.log").read_text()
            time.sleep(0.1)
        assert get(port, probe["path"])[0] == 200
        assert get(port, container["readinessProbe"]["httpGet"]["path"])[0] == 200
        code, text = get(port, endpoint["path"])
        assert code == 200
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
    # The run judged the fixture: the labelled families have samples.
    assert 'drift_sentinel_audit_objects{result="drifted"}' in text, text
    return families_of(text)


def test_dashboard_and_alerts_use_only_metrics_the_agent_exposes(helm, agent_binary, tmp_path):
    exposed = agent_metric_families(agent_binary, tmp_path)
    audit = audit_metric_families(agent_binary, tmp_path)
    # The labelled families appeared (the review was counted): the comparison is not vacuous.
    for family in ("drift_sentinel_admission_requests_total", "drift_sentinel_violations_total",
                   "drift_sentinel_admission_duration_seconds", "drift_sentinel_export_records_dropped_total",
                   "drift_sentinel_export_records_published_total", "drift_sentinel_rules_invalid"):
        assert family in exposed, sorted(exposed)
    # The webhook does not serve the audit's metrics; the audit process serves every one of them.
    assert not exposed & set(AUDIT_METRICS), sorted(exposed & set(AUDIT_METRICS))
    assert set(AUDIT_METRICS) <= audit, sorted(audit)
    exposed |= audit
    rule_exprs = [r["expr"] for r in alerts(render(sets=["metrics.prometheusRule.enabled=true"])).values()]
    used = referenced_metrics(dashboard_exprs() + rule_exprs)
    assert used, "no metric referenced"
    unknown = used - exposed
    assert not unknown, f"referenced but not exposed by the agent or the audit: {sorted(unknown)}"
    # And every alert of the brief and the audit drift panels are there.
    assert {"drift_sentinel_admission_duration_seconds", "drift_sentinel_admission_requests_total",
            "drift_sentinel_export_records_dropped_total", "drift_sentinel_rules_invalid",
            "drift_sentinel_audit_last_run_timestamp_seconds"} <= referenced_metrics(rule_exprs)
    assert {"drift_sentinel_audit_objects", "drift_sentinel_audit_drifted_objects",
            "drift_sentinel_violations_total"} <= referenced_metrics(dashboard_exprs())


def test_the_metric_name_check_can_fail():
    assert referenced_metrics(["rate(drift_sentinel_admission_requests_totall[5m])"]) == {
        "drift_sentinel_admission_requests_totall"}
    assert referenced_metrics(["histogram_quantile(0.9, drift_sentinel_admission_duration_seconds_bucket)"]) == {
        "drift_sentinel_admission_duration_seconds"}


# --- NetworkPolicy, priority, topology, replicas ----------------------------------------------------


def test_network_policy_admits_only_the_webhook_port(helm):
    assert not find_all(render(), "NetworkPolicy")
    docs = render(sets=["networkPolicy.enabled=true"])
    policy = find(docs, "NetworkPolicy")
    dep = find(docs, "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (c,) = pod_of(docs)["containers"]
    # One rule, the webhook's container port, any source; never the admin port.
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": c["ports"][0]["containerPort"]}]}]
    assert 9090 not in [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    validate(docs)
    docs = render("--set-json", 'networkPolicy.from=[{"ipBlock":{"cidr":"172.20.0.0/16"}}]',
                  sets=["networkPolicy.enabled=true", "service.targetPort=9443"])
    assert find(docs, "NetworkPolicy")["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 9443}], "from": [{"ipBlock": {"cidr": "172.20.0.0/16"}}]}]
    validate(docs)


def test_the_admin_api_stays_on_loopback(helm):
    """The chart never exposes the admin port: no container port, no Service port, no flag."""
    for docs in (render(), render(values=[REPO / "tests" / "chart" / "values-all.yaml"])):
        (c,) = pod_of(docs)["containers"]
        assert [p["name"] for p in c["ports"]] == ["https"]
        assert not [a for a in c["args"] if a.startswith("--admin-address")]
        assert [p["name"] for p in find(docs, "Service")["spec"]["ports"]] == ["https"]


@pytest.mark.parametrize("sets,replicas,pdb", [
    ([], 3, True),
    (["webhook.failurePolicy=Ignore"], 2, True),
    (["replicaCount=5"], 5, True),
    (["replicaCount=1"], 1, False),
    (["webhook.failurePolicy=Ignore", "replicaCount=4"], 4, True),
])
def test_replicas_follow_the_failure_policy_unless_set(helm, sets, replicas, pdb):
    docs = render(sets=sets)
    assert find(docs, "Deployment")["spec"]["replicas"] == replicas
    assert bool(find_all(docs, "PodDisruptionBudget")) == pdb


def test_priority_and_topology_spread_defaults_and_opt_outs(helm):
    pod = pod_of(render())
    assert pod["priorityClassName"] == "system-cluster-critical"
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    pod = pod_of(render("--set-json", "topologySpreadConstraints=[]", sets=["priorityClassName="]))
    assert "priorityClassName" not in pod and "topologySpreadConstraints" not in pod


# --- everything on, validated ---------------------------------------------------------------------


def test_everything_on_validates(helm):
    docs = render("--set-json", "webhook.matchConditions=" + json.dumps([{"name": "not-argocd", "expression": ARGOCD}]), sets=CM + MONITORING + ["networkPolicy.enabled=true"])
    seen = validate(docs)
    assert {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate"),
            ("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule"),
            ("networking.k8s.io/v1", "NetworkPolicy"), ("v1", "ConfigMap")} <= seen
    out = run_helm("lint", str(CHART), "--strict", "--namespace", NAMESPACE, *sum((["--set", s] for s in
                                                                                 CM + MONITORING), []), check=False)
    assert out.returncode == 0 and "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


# --- README and NOTES --------------------------------------------------------------------------------


def chart_readme_module():
    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "scripts" / "chart-readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_values_table_is_generated_and_fresh():
    module = chart_readme_module()
    values_text = (CHART / "values.yaml").read_text()
    readme = (CHART / "README.md").read_text()
    table = module.render_table(values_text)
    assert module.updated(readme, table) == readme, "charts/drift-sentinel/README.md is stale: " \
                                                    "run python3 scripts/chart-readme.py"
    # Every leaf of values.yaml has a row (its own or a documented parent's).
    rows = set(re.findall(r"^\| `([^`]+)` \|", table, re.M))
    from test_chart_render import DEFAULTS, leaves
    for path in leaves(DEFAULTS):
        dotted = ".".join(path)
        assert any(dotted == r or dotted.startswith(r + ".") for r in rows), f"{dotted} has no row"
    # The script's --check is what fails on a stale table.
    edited = table.replace('| `logLevel` | string | `"INFO"`', '| `logLevel` | string | `"DEBUG"`')
    assert edited != table
    assert module.updated(readme, edited) != readme
    check = subprocess.run(["python3", str(REPO / "scripts" / "chart-readme.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_readme_table_follows_a_changed_comment(tmp_path):
    module = chart_readme_module()
    values_text = (CHART / "values.yaml").read_text().replace(
        "# -- Scrape interval.", "# -- How often Prometheus scrapes.")
    assert "| `metrics.serviceMonitor.interval` | string | `\"30s\"` | How often Prometheus scrapes. |" in \
        module.render_table(values_text)


def notes(*sets: str, values=()) -> str:
    args = ["install", "ds", str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    for v in values:
        args += ["--values", str(v)]
    for s in sets:
        args += ["--set", s]
    out = run_helm(*args)
    return out.stdout[out.stdout.index("NOTES:"):]


def test_notes_tell_how_to_check_the_webhook_and_how_to_get_out(helm):
    text = notes()
    assert (f"kubectl drift status --agent-namespace {NAMESPACE} -l app.kubernetes.io/name=drift-sentinel,"
            f"app.kubernetes.io/instance=ds,app.kubernetes.io/component=webhook --webhook {FULLNAME}") in text
    assert "kubectl apply --dry-run=server -f -" in text
    assert "denied the request: Drift Sentinel: immutable fields changed: spec.replicas" in text
    assert f"kubectl delete validatingwebhookconfiguration {FULLNAME}" in text
    # Issue 42: no export by default, so no Connection to name (status would report it missing);
    # with export on (the webhook's or the audit's), the Connection the pods use.
    status = next(line for line in text.splitlines() if "kubectl drift status" in line)
    assert status.endswith(f"--webhook {FULLNAME}"), status
    for on in ("enableAdmissionViolationExport=true", "enableViolationExport=true"):
        status = next(line for line in notes(on, "audit.connection=mine").splitlines()
                      if "kubectl drift status" in line)
        assert status.endswith(f"--webhook {FULLNAME} --connection mine"), (on, status)
    # The names follow the release.
    other = notes("fullnameOverride=guard", "nameOverride=sentinel")
    assert "kubectl delete validatingwebhookconfiguration guard" in other
    assert "-l app.kubernetes.io/name=sentinel," in other
    # A namespace selector of one's own: the check namespace is labelled to be intercepted.
    labelled = notes("webhook.namespaceSelector.key=team", "webhook.namespaceSelector.operator=In",
                     "webhook.namespaceSelector.values={payments}")
    assert "kubectl label namespace drift-sentinel-check team=payments" in labelled
    assert "kubectl label namespace drift-sentinel-check" not in text
