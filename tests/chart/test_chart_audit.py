"""The audit Deployment (reference §8, §10; docs/install.md "The audit"), rendered with the real helm:
one replica of the agent image running `drift-sentinel audit`, probes on its plain-HTTP port, the
webhook's security contexts, its own ServiceAccount and least-privilege RBAC, the audit.* values,
enableViolationExport wired as the webhook's admission export is, and the OpenReports CRDs behind
openreports.installCRDs. Its real /metrics are checked in test_chart_operators.py."""

from __future__ import annotations

import kubernetes_validate
import yaml

from conftest import CHART, FULLNAME, NAMESPACE, find, find_all, render, render_text, validate_k8s

AUDIT = f"{FULLNAME}-audit"
K8S_VERSIONS = ["1.25.0", kubernetes_validate.latest_version() + ".0"]
REPORTS_API = ["--api-versions", "openreports.io/v1alpha1/Report"]


def audit_pod(docs):
    return find(docs, "Deployment", AUDIT)["spec"]["template"]["spec"]


def audit_container(docs):
    (container,) = [c for c in audit_pod(docs)["containers"] if c["name"] == "audit"]
    return container


def args_of(docs) -> list[str]:
    return audit_container(docs)["args"]


def test_the_audit_deployment_by_default(helm):
    docs = render()
    for doc in docs:
        for version in K8S_VERSIONS:
            validate_k8s(doc, version)
    dep = find(docs, "Deployment", AUDIT)
    webhook = find(docs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert dep["metadata"]["labels"]["app.kubernetes.io/component"] == "audit"
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "drift-sentinel", "app.kubernetes.io/instance": "ds",
                        "app.kubernetes.io/component": "audit"}
    assert dep["spec"]["template"]["metadata"]["labels"] == selector
    # The webhook's Service and PodDisruptionBudget never select the audit pods.
    assert find(docs, "Service")["spec"]["selector"] != selector
    pod, webhook_pod = audit_pod(docs), webhook["spec"]["template"]["spec"]
    container = audit_container(docs)
    (webhook_container,) = webhook_pod["containers"]
    assert container["image"] == webhook_container["image"]
    assert pod["securityContext"] == webhook_pod["securityContext"]
    assert container["securityContext"] == webhook_container["securityContext"]
    assert pod["serviceAccountName"] == AUDIT
    # Not part of the admission path: no system-cluster-critical priority.
    assert "priorityClassName" not in pod
    assert container["args"] == [
        "audit", "--address=:8080", "--audit-interval=60s", "--audit-chunk-size=500",
        "--audit-resources=apps/deployments,apps/statefulsets,apps/daemonsets,argoproj.io/rollouts",
        "--audit-reports=none", f"--last-good-configmap={FULLNAME}-last-good-rules", "--events=true",
        "--record-signing-key=/record-key/seed", f"--webhook-configuration={FULLNAME}"]
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, "plain HTTP, no scheme"
    assert container["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"},
                                      "limits": {"cpu": "500m", "memory": "128Mi"}}
    env = {e["name"]: e for e in container["env"]}
    assert env["DRIFT_SENTINEL_POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # No export volume, no certificate: the record signing key only (events.enabled).
    assert [v["name"] for v in pod["volumes"]] == ["tmp", "record-key"]


def test_audit_values_become_flags(helm):
    docs = render(sets=["audit.interval=5m", "audit.chunkSize=100", "audit.driftManagers={kubectl-edit,deploy-bot}",
                        "clusterRuleNamespaces={platform}", "audit.reports=openreports"])
    args = args_of(docs)
    for flag in ("--audit-interval=5m", "--audit-chunk-size=100", "--audit-drift-managers=kubectl-edit,deploy-bot",
                 "--cluster-rule-namespaces=platform", "--audit-reports=openreports"):
        assert flag in args, args
    # The resources a `*` selector audits follow webhook.rules; subresources are left out.
    docs = render("--set-json", 'webhook.rules=[{"apiGroups":["apps"],"apiVersions":["v1"],"operations":["UPDATE"],'
                  '"resources":["deployments","deployments/scale"],"scope":"Namespaced"},'
                  '{"apiGroups":[""],"apiVersions":["v1"],"operations":["UPDATE"],"resources":["services"]}]')
    assert "--audit-resources=apps/deployments,/services" in args_of(docs)
    rules = find(docs, "ClusterRole", AUDIT)["rules"]
    assert {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]} in rules
    assert {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]} in rules
    for bad in (["audit.interval=soon"], ["audit.chunkSize=0"], ["audit.reports=policyreports"]):
        out = render_text(sets=bad, check=False)
        assert out.returncode != 0 and "audit" in out.stderr, (bad, out.stderr)


def test_audit_disabled_renders_none_of_it(helm):
    docs = render(sets=["audit.enabled=false"])
    assert not [d for d in docs if d["metadata"]["name"].startswith(AUDIT)]
    assert len(find_all(docs, "Deployment")) == 1


def test_the_audit_rbac_is_read_only_but_for_its_reports_and_events(helm):
    docs = render()
    role = find(docs, "ClusterRole", AUDIT)
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"], "verbs": ["list", "watch"]},
        {"apiGroups": ["argoproj.io"], "resources": ["rollouts"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "list"]},
        # The webhook's own configuration, by name: nothing else of admissionregistration.
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
         "resourceNames": [FULLNAME], "verbs": ["get"]},
        {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*"], "verbs": ["get"]},
    ]
    # … the one the chart registers the webhook with.
    assert find(docs, "ValidatingWebhookConfiguration", FULLNAME)
    binding = find(docs, "ClusterRoleBinding", AUDIT)
    assert binding["roleRef"]["name"] == AUDIT
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AUDIT, "namespace": NAMESPACE}]
    assert find(docs, "ServiceAccount", AUDIT)["metadata"]["labels"]["app.kubernetes.io/component"] == "audit"
    last_good = find(docs, "Role", f"{AUDIT}-last-good")
    assert last_good["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                                   "resourceNames": [f"{FULLNAME}-last-good-rules"], "verbs": ["get"]}]
    assert find(docs, "RoleBinding", f"{AUDIT}-last-good")["subjects"][0]["name"] == AUDIT
    # The webhook's ClusterRole is unchanged: nothing of the audit's leaked into it.
    assert not any("deployments" in r.get("resources", []) for r in find(docs, "ClusterRole")["rules"])
    # Without serviceAccount.create, the audit runs as the webhook's existing account.
    docs = render(sets=["serviceAccount.create=false", "serviceAccount.name=shared"])
    assert audit_pod(docs)["serviceAccountName"] == "shared"
    assert find(docs, "ClusterRoleBinding", AUDIT)["subjects"][0]["name"] == "shared"
    assert not find_all(docs, "ServiceAccount")


def test_reports_follow_the_cluster_or_the_value(helm):
    reports_rule = {"apiGroups": ["openreports.io"], "resources": ["reports", "clusterreports"],
                    "verbs": ["get", "list", "create", "patch", "delete"]}
    # auto: on when the cluster serves openreports.io/v1alpha1 …
    docs = render(*REPORTS_API)
    assert "--audit-reports=openreports" in args_of(docs)
    assert reports_rule in find(docs, "ClusterRole", AUDIT)["rules"]
    # … off when it does not (no warning at every start, no grant) …
    docs = render()
    assert "--audit-reports=none" in args_of(docs)
    assert reports_rule not in find(docs, "ClusterRole", AUDIT)["rules"]
    # … and `none` wins over the cluster.
    docs = render(*REPORTS_API, sets=["audit.reports=none"])
    assert "--audit-reports=none" in args_of(docs)


def test_openreports_crds_behind_a_value(helm):
    assert not find_all(render(), "CustomResourceDefinition")
    docs = render(sets=["openreports.installCRDs=true"])
    crds = {d["metadata"]["name"]: d for d in find_all(docs, "CustomResourceDefinition")}
    assert sorted(crds) == ["clusterreports.openreports.io", "reports.openreports.io"]
    for crd in crds.values():
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
        for v in K8S_VERSIONS:
            validate_k8s(crd, v)
    assert crds["reports.openreports.io"]["spec"]["scope"] == "Namespaced"
    assert crds["clusterreports.openreports.io"]["spec"]["scope"] == "Cluster"
    # The chart installs them, so the audit writes reports.
    assert "--audit-reports=openreports" in args_of(docs)
    # What the audit writes fits the schema's fields (docs/audit.md's example report).
    schema = crds["reports.openreports.io"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    result = schema["properties"]["results"]["items"]["properties"]
    for field in ("policy", "result", "message", "properties", "resources", "source", "scored", "timestamp"):
        assert field in result, field
    assert set(schema["properties"]["summary"]["properties"]) == {"pass", "fail", "warn", "error", "skip"}


def test_enable_violation_export_wires_the_audit_as_the_webhooks_export(helm):
    docs = render(sets=["enableViolationExport=true"])
    args = args_of(docs)
    for flag in ("--enable-violation-export", "--audit-connection=audit-connection",
                 "--audit-channel=audit-channel", "--export-root=/tmp/violations"):
        assert flag in args, args
    pod = audit_pod(docs)
    assert {"name": "tmp-violations", "emptyDir": {}} in pod["volumes"]
    assert {"name": "tmp-violations", "mountPath": "/tmp/violations"} in audit_container(docs)["volumeMounts"]
    # The Connection, and the export Role for the audit's ServiceAccount only (the webhook does
    # not export here).
    assert find(docs, "Connection")["metadata"]["name"] == "audit-connection"
    binding = find(docs, "RoleBinding", f"{FULLNAME}-export")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": AUDIT, "namespace": NAMESPACE}]
    webhook_args = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in webhook_args if "export" in a]
    # Both exports: one Connection, both accounts in the Role.
    docs = render(sets=["enableViolationExport=true", "enableAdmissionViolationExport=true"])
    assert len(find_all(docs, "Connection")) == 1
    assert [s["name"] for s in find(docs, "RoleBinding", f"{FULLNAME}-export")["subjects"]] == [FULLNAME, AUDIT]
    # The sidecar of your own, only with the export.
    sidecar = ['audit.exportSidecar={"name":"reader","image":"example.com/reader:1",'
               '"volumeMounts":[{"name":"tmp-violations","mountPath":"/tmp/violations"}]}']
    docs = render("--set-json", sidecar[0], sets=["enableViolationExport=true"])
    names = [c["name"] for c in audit_pod(docs)["containers"]]
    assert names == ["audit", "reader"]
    for version in K8S_VERSIONS:
        validate_k8s(find(docs, "Deployment", AUDIT), version)
    docs = render("--set-json", sidecar[0])
    assert [c["name"] for c in audit_pod(docs)["containers"]] == ["audit"]
    # The export values are checked for the audit as for the webhook.
    out = render_text(sets=["enableViolationExport=true", "exportBackend=kafka"], check=False)
    assert out.returncode != 0
    assert 'exportBackend must be "disk" when enableViolationExport is true (got "kafka")' in out.stderr, out.stderr
    out = render_text(sets=["enableViolationExport=true", "audit.exportConnection.path=var/out"], check=False)
    assert out.returncode != 0 and "is not inside audit.exportVolumeMount.path" in out.stderr
    # With the audit off, enableViolationExport exports nothing.
    docs = render(sets=["enableViolationExport=true", "audit.enabled=false"])
    assert not find_all(docs, "Connection")


def test_values_yaml_documents_every_audit_value():
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["audit"]["enabled"] is True
    assert defaults["enableViolationExport"] is False
    assert defaults["openreports"] == {"installCRDs": False}
    text = (CHART / "values.yaml").read_text()
    for key in ("enabled:", "interval:", "chunkSize:", "driftManagers:", "reports:", "exportSidecar:",
                "installCRDs:", "enableViolationExport:"):
        index = text.index(key if key.startswith("enable") else f"  {key}")
        comment = text[:index].rstrip().splitlines()[-1].strip()
        assert comment.startswith("#"), f"{key} has no comment above it"
