"""The chart rendered with the real helm: lint, defaults, every documented value, the values
schema, and every document validated against the Kubernetes schemas."""

from __future__ import annotations

import base64
import copy
import re

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

import operator_kinds
from conftest import validate_k8s, admission_hook, CHART, FULLNAME, NAMESPACE, REPO, TESTS, find, find_all, render, render_text, run_helm, \
    tls_material, tls_secret, tls_secrets, is_audit

VALUES_ALL = TESTS / "values-all.yaml"
# On top of values-all.yaml: the values whose objects need CRDs of other projects.
VALUES_ALL_CRDS = TESTS / "values-all-crds.yaml"
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
ALL = yaml.safe_load(VALUES_ALL.read_text())
ALL_CRDS = yaml.safe_load(VALUES_ALL_CRDS.read_text())
# Kubernetes versions whose schemas every rendered document must satisfy (strict: no unknown
# fields): the oldest the chart declares (kubeVersion >=1.25) and the newest known.
K8S_VERSIONS = ["1.25.0", "1.35.0", kubernetes_validate.latest_version() + ".0"]
# Values whose content is free-form Kubernetes structure: a leaf as a whole.
FREE_FORM = {"resources", "audit.resources"}
# Values that values-all.yaml must keep at their default, and why (test_chart_export.py covers
# their other values).
AT_DEFAULT = {
    "exportBackend": "disk is the only backend while enableAdmissionViolationExport is on",
    "audit.exportVolumeMount.path": "must strictly contain audit.exportConnection.path and its default; "
                                    "the only other such directory, /tmp, is the chart's scratch volume",
    "webhook.url": "the agent tests of values-all call the agent through the Service with the generated "
                   "CA; test_webhook_url covers it",
    "webhook.caBundle": "only used with webhook.url; test_webhook_url covers it",
    "events.recordKey.previousPublicKeys": "only used with events.enabled, which values-all turns off; "
                                           "test_previous_record_keys_are_mounted_for_both_pods covers it",
    "webhook.validateRules.url": "only used with webhook.url; test_webhook_url covers it",
    **{f"webhook.clientAuth.{name}": "the agent tests of values-all call without a client certificate; "
                                     "test_chart_client_auth.py covers it"
       for name in ("enabled", "caBundle", "caSecret.name", "caSecret.key", "names")},
}
# Values that values-all.yaml keeps at their default because their objects need CRDs that the
# end-to-end API server (which installs values-all.yaml) lacks: values-all-crds.yaml sets them,
# and they must change the render of the two files together.
CRD_VALUES = {
    "certManager.enabled", "certManager.issuerRef.name", "certManager.issuerRef.kind",
    "certManager.issuerRef.group",
    "metrics.serviceMonitor.enabled", "metrics.serviceMonitor.interval", "metrics.serviceMonitor.scrapeTimeout",
    "metrics.serviceMonitor.labels", "metrics.serviceMonitor.insecureSkipVerify",
    "metrics.prometheusRule.enabled", "metrics.prometheusRule.labels", "metrics.prometheusRule.runbookBaseUrl",
    "metrics.prometheusRule.latencyThresholdSeconds", "metrics.prometheusRule.denialRateThreshold",
    "metrics.prometheusRule.auditIntervalSeconds", "metrics.prometheusRule.bypassMaxAgeSeconds",
}
# Custom kinds the chart renders, with their CRD in crds/: validated against that CRD's schema in
# test_chart_export.py, since kubernetes-validate knows only built-in kinds.
CUSTOM_KINDS = {(crd["spec"]["group"], crd["spec"]["names"]["kind"])
                for f in sorted((CHART / "crds").glob("*.yaml"))
                for crd in yaml.safe_load_all(f.read_text()) if crd}


def leaves(values: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for key, value in values.items():
        path = prefix + (key,)
        if isinstance(value, dict) and value and ".".join(path) not in FREE_FORM:
            out += leaves(value, path)
        else:
            out.append(path)
    return out


def get_path(values: dict, path: tuple):
    for key in path:
        values = values[key]
    return values


def set_path(values: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        values = values[key]
    values[path[-1]] = value


def merged(base: dict, overlay: dict) -> dict:
    """Helm's merge of two values files: maps merge, anything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def masked(text: str) -> str:
    """Rendered text with the generated certificate material replaced by what the values decide
    of it (it is new on every render): the serving certificate's names and lifetime."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    if not tls_secrets(docs):
        return text  # certManager.enabled: nothing generated
    cert = x509.load_pem_x509_certificate(tls_material(docs)["tls.crt"].encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    lifetime = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    text = re.sub(r'((?:ca\.crt|tls\.crt|tls\.key|caBundle): )"[A-Za-z0-9+/=]+"', r"\1<pem>", text)
    # The record signing key's seed is new on every render too.
    text = re.sub(r'(seed: )"[A-Za-z0-9+/=]+"', r"\1<seed>", text)
    return f"{text}\n# SANs {sorted(names.get_values_for_type(x509.DNSName))}, {lifetime} days"


# --- lint ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize("values", [None, VALUES_ALL], ids=["defaults", "all-values"])
def test_helm_lint(helm, strict, values):
    args = ["lint", str(CHART), "--namespace", NAMESPACE]
    if strict:
        args.append("--strict")
    if values:
        args += ["--values", str(values)]
    out = run_helm(*args, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout
    assert "[ERROR]" not in out.stdout and "[WARNING]" not in out.stdout, out.stdout


# --- rendering -----------------------------------------------------------------------------------


def test_defaults_render_the_documented_objects(helm):
    docs = render()
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("ClusterRole", FULLNAME),
        ("ClusterRoleBinding", FULLNAME),
        ("ConfigMap", f"{FULLNAME}-default-rule"),
        ("ConfigMap", f"{FULLNAME}-last-good-rules"),
        # Where the webhook publishes its record signing key's public half (events.enabled).
        ("ConfigMap", f"{FULLNAME}-record-public-key"),
        ("Role", f"{FULLNAME}-record-key"),
        ("RoleBinding", f"{FULLNAME}-record-key"),
        # The record signing key itself, mounted into the webhook and audit pods.
        ("Secret", f"{FULLNAME}-record-key"),
        ("Deployment", FULLNAME),
        ("PodDisruptionBudget", FULLNAME),
        ("Role", f"{FULLNAME}-last-good"),
        ("RoleBinding", f"{FULLNAME}-last-good"),
        ("Secret", f"{FULLNAME}-cert"),
        ("Service", FULLNAME),
        ("ServiceAccount", FULLNAME),
        # The audit (audit.enabled, on by default).
        ("ClusterRole", f"{FULLNAME}-audit"),
        ("ClusterRoleBinding", f"{FULLNAME}-audit"),
        ("Deployment", f"{FULLNAME}-audit"),
        ("Role", f"{FULLNAME}-audit-last-good"),
        ("RoleBinding", f"{FULLNAME}-audit-last-good"),
        ("ServiceAccount", f"{FULLNAME}-audit"),
        ("ValidatingWebhookConfiguration", FULLNAME),
    ])
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "ds"


def test_every_value_is_exercised_and_documented(helm, tmp_path):
    """Each leaf of values.yaml is set in values-all.yaml, appears in docs/install.md, and
    changes the rendered output: reverting it to its default (or flipping a switch that
    values-all keeps at its default) gives a different render."""
    install_md = (REPO / "docs" / "install.md").read_text()
    base = masked(render_text(values=[VALUES_ALL]).stdout)
    all_crds = merged(ALL, ALL_CRDS)
    base_crds = masked(render_text(values=[VALUES_ALL, VALUES_ALL_CRDS]).stdout)
    missing, undocumented, no_effect = [], [], []
    for path in leaves(DEFAULTS):
        dotted = ".".join(path)
        if dotted == "global":
            continue
        try:
            value = get_path(ALL, path)
        except (KeyError, TypeError):
            missing.append(dotted)
            continue
        if f"`{dotted}`" not in install_md:
            undocumented.append(dotted)
        default = get_path(DEFAULTS, path)
        if dotted in AT_DEFAULT:
            assert value == default, f"{dotted}: {AT_DEFAULT[dotted]}"
            continue
        values, reference = ALL, base
        if dotted in CRD_VALUES:
            assert value == default, f"{dotted}: kept at its default in values-all.yaml (its CRD is missing " \
                                     "from the end-to-end API server); values-all-crds.yaml sets it"
            values, reference = all_crds, base_crds
            value = get_path(values, path)
            if value == default:
                missing.append(f"{dotted} (in values-all-crds.yaml)")
                continue
        variant = copy.deepcopy(values)
        if value != default:
            set_path(variant, path, default)
        elif isinstance(value, bool):
            set_path(variant, path, not value)
        else:
            no_effect.append(f"{dotted} (same as default)")
            continue
        variant_file = tmp_path / f"{dotted}.yaml"
        variant_file.write_text(yaml.safe_dump(variant))
        other = render_text(values=[variant_file], check=False)
        assert other.returncode == 0, f"{dotted}: {other.stderr}"
        if masked(other.stdout) == reference:
            no_effect.append(dotted)
    assert not missing, f"values not set in values-all.yaml: {missing}"
    assert not undocumented, f"values not documented in docs/install.md: {undocumented}"
    assert not no_effect, f"values without effect on the render: {no_effect}"
    # Nothing else hides in values-all-crds.yaml.
    stray = [".".join(p) for p in leaves(ALL_CRDS)
             if not any(".".join(p) == v or ".".join(p).startswith(v + ".") for v in CRD_VALUES)]
    assert not stray, f"values-all-crds.yaml sets values that are not in CRD_VALUES: {stray}"


def test_all_values_render_as_set(helm):
    docs = render(values=[VALUES_ALL])
    name = "drift-guard"
    dep = find(docs, "Deployment", name)
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert dep["spec"]["replicas"] == 3
    assert c["image"] == "registry.example.com/platform/drift-sentinel:0.1.0-rc.1"
    assert c["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "drift-guard-agent"
    assert find(docs, "ServiceAccount", "drift-guard-agent")["metadata"]["annotations"] == {
        "example.com/owner": "platform-team"}
    assert find(docs, "ClusterRoleBinding")["subjects"][0]["name"] == "drift-guard-agent"
    env = {e["name"]: e for e in c["env"]}
    assert env["DRIFT_SENTINEL_LOG_LEVEL"] == {"name": "DRIFT_SENTINEL_LOG_LEVEL", "value": "DEBUG"}
    assert env["DRIFT_SENTINEL_MAX_CONNECTIONS"] == {"name": "DRIFT_SENTINEL_MAX_CONNECTIONS", "value": "256"}
    assert not [a for a in c["args"] if a.startswith("--log-level")]
    assert c["env"][-2:] == ALL["env"]
    assert c["args"][-2:] == ["--watch-resync=1m", "--startup-sync-timeout=45s"]
    assert c["ports"] == [{"name": "https", "containerPort": 9443, "protocol": "TCP"}]
    assert "--address=:9443" in c["args"]
    assert "--tls-cert-file=/tls/server.crt" in c["args"]
    assert "--tls-key-file=/tls/server.key" in c["args"]
    assert {"name": "tls", "mountPath": "/tls", "readOnly": True} in c["volumeMounts"]
    tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    assert tls_volume["items"] == [{"key": "tls.crt", "path": "server.crt"}, {"key": "tls.key", "path": "server.key"}]
    assert dep["spec"]["template"]["metadata"]["annotations"] == ALL["podAnnotations"]
    assert c["resources"] == ALL["resources"]
    assert pod["nodeSelector"] == ALL["nodeSelector"]
    assert pod["tolerations"] == ALL["tolerations"]
    assert pod["affinity"] == ALL["affinity"]
    assert pod["priorityClassName"] == "system-node-critical"
    selector = dep["spec"]["selector"]["matchLabels"]
    assert pod["topologySpreadConstraints"] == [
        {**ALL["topologySpreadConstraints"][0], "labelSelector": {"matchLabels": selector}},
        ALL["topologySpreadConstraints"][1],
    ]
    assert dep["metadata"]["labels"]["app.kubernetes.io/name"] == "sentinel"
    svc = find(docs, "Service", name)
    assert svc["spec"]["ports"][0]["port"] == 8443
    assert svc["spec"]["ports"][0]["targetPort"] == 9443
    assert find(docs, "PodDisruptionBudget", name)["spec"]["minAvailable"] == 2
    hook = find(docs, "ValidatingWebhookConfiguration", name)["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 5
    assert hook["matchPolicy"] == "Exact"
    assert hook["clientConfig"]["service"] == {"name": name, "namespace": NAMESPACE, "path": "/validate",
                                               "port": 8443}
    assert hook["rules"] == [{
        "apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets",
                      "deployments/scale", "statefulsets/scale", "replicasets/scale"],
        "scope": "Namespaced",
    }]
    assert hook["namespaceSelector"]["matchExpressions"][0] == {
        "key": "environment", "operator": "In", "values": ["production", "staging"]}
    names = hook["namespaceSelector"]["matchExpressions"][1]
    assert names["values"] == [NAMESPACE, "kube-system", "monitoring", "cert-manager"]
    assert hook["matchConditions"] == ALL["webhook"]["matchConditions"]
    policy = find(docs, "NetworkPolicy", name)
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 9443}],
                                          "from": ALL["networkPolicy"]["from"]}]
    dashboard = find(docs, "ConfigMap", f"{name}-dashboard")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana.example.com/dashboard"] == "true"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Security"}
    rules = {d["metadata"]["name"]: d for d in find_all(docs, "ConfigMap")
             if d["metadata"].get("annotations", {}).get("drift-sentinel.k8s.io/rule")}
    assert set(rules) == {f"{name}-default-rule", "drift-sentinel-production", "replicas-only"}
    assert rules["drift-sentinel-production"]["metadata"]["namespace"] == "shop"
    assert rules["replicas-only"]["metadata"]["namespace"] == NAMESPACE
    assert yaml.safe_load(rules["replicas-only"]["data"]["spec"]) == ALL["rules"][1]["spec"]
    assert rules["drift-sentinel-production"]["data"]["spec"] == ALL["rules"][0]["spec"]
    assert yaml.safe_load(rules[f"{name}-default-rule"]["data"]["spec"])["mode"] == "warn"
    for cm in rules.values():
        assert cm["metadata"]["annotations"] == {"drift-sentinel.k8s.io/rule": "true"}
        assert cm["metadata"]["labels"]["app.kubernetes.io/component"] == "rule"


def test_switches_turn_objects_off(helm):
    docs = render(sets=["defaultRule.enabled=false", "serviceAccount.create=false",
                        "podDisruptionBudget.enabled=false"])
    kinds = {d["kind"] for d in docs}
    assert "ServiceAccount" not in kinds and "PodDisruptionBudget" not in kinds
    # The only ConfigMaps left are the agent's last-good store and where it publishes its record
    # key's public half, no rule.
    assert sorted(cm["metadata"]["name"] for cm in find_all(docs, "ConfigMap")) == sorted([
        f"{FULLNAME}-last-good-rules", f"{FULLNAME}-record-public-key"])
    assert find(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "default"
    # A single replica gets no PodDisruptionBudget (minAvailable 1 would block every drain).
    assert not find_all(render(sets=["replicaCount=1"]), "PodDisruptionBudget")


def test_deployment_is_hardened_and_probed_over_https(helm):
    dep = find(render(), "Deployment")
    assert dep["spec"]["replicas"] == 3  # replicaCount empty, failurePolicy Fail
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "affinity" not in pod
    assert pod["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": dep["spec"]["selector"]["matchLabels"]}}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    (port,) = c["ports"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"], "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"], "scheme": "HTTPS"}
    assert f"--address=:{port['containerPort']}" in c["args"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "tls")
    assert mount["readOnly"] is True
    assert f"--tls-cert-file={mount['mountPath']}/tls.crt" in c["args"]
    assert f"--tls-key-file={mount['mountPath']}/tls.key" in c["args"]
    secret_volume = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    assert secret_volume["secretName"] == f"{FULLNAME}-cert"
    assert port == {"name": "https", "containerPort": 8443, "protocol": "TCP"}
    assert mount["mountPath"] == "/tls" and "--tls-cert-file=/tls/tls.crt" in c["args"]
    assert "items" not in secret_volume  # tls.crt and tls.key keep the Secret's key names
    # The Service sends the webhook's port to the container's HTTPS port.
    svc = find(render(), "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == port["containerPort"]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_rbac_grants_the_least_rights(helm):
    docs = render()
    role = find(docs, "ClusterRole")
    granted = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb))
    assert granted == {
        ("", "configmaps", "get"), ("", "configmaps", "list"), ("", "configmaps", "watch"),
        ("", "namespaces", "get"), ("", "namespaces", "list"), ("", "namespaces", "watch"),
        ("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch"),
    }
    binding = find(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]


def test_the_record_key_configmap_and_its_role(helm):
    docs = render()
    cm = find(docs, "ConfigMap", f"{FULLNAME}-record-public-key")
    assert "data" not in cm or not cm["data"], cm
    assert cm["metadata"]["labels"]["drift-sentinel.k8s.io/record-key"] == "ed25519"
    role = find(docs, "Role", f"{FULLNAME}-record-key")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": [f"{FULLNAME}-record-public-key"],
                              "verbs": ["get", "patch"]}]
    binding = find(docs, "RoleBinding", f"{FULLNAME}-record-key")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    # The private half: 32 random bytes, a new seed per install (lookup keeps it on upgrade).
    secret = find(docs, "Secret", f"{FULLNAME}-record-key")
    seed = base64.b64decode(secret["data"]["seed"])
    assert len(seed) == 32
    assert find(render(), "Secret", f"{FULLNAME}-record-key")["data"]["seed"] != secret["data"]["seed"]
    # Both the webhook and the audit pods mount it read-only and are given it as the flag.
    deployments = find_all(docs, "Deployment")
    assert len(deployments) == 2
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "record-key"]
        assert volume["secret"]["secretName"] == f"{FULLNAME}-record-key"
        container = pod["containers"][0]
        assert "--record-signing-key=/record-key/seed" in container["args"]
        # No previous keys by default: no --record-verify-keys, no volume of them.
        assert not [a for a in container["args"] if a.startswith("--record-verify-keys")]
        assert not [v for v in pod["volumes"] if v["name"] == "record-verify-keys"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "record-key"]
        assert mount == {"name": "record-key", "mountPath": "/record-key", "readOnly": True}
    # No Role of the chart lets anyone read the Secret (only the kubelet, to mount it).
    for role in find_all(docs, "Role") + find_all(docs, "ClusterRole"):
        for rule in role["rules"]:
            assert "secrets" not in rule.get("resources", []), role["metadata"]["name"]
    off = render(sets=["events.enabled=false"])
    names = {(d["kind"], d["metadata"]["name"]) for d in off}
    assert ("ConfigMap", f"{FULLNAME}-record-public-key") not in names
    assert ("Secret", f"{FULLNAME}-record-key") not in names
    webhook = find(off, "ValidatingWebhookConfiguration")
    assert "drift-sentinel.k8s.io/record-key-configmap" not in (webhook["metadata"].get("annotations") or {})
    for deployment in find_all(off, "Deployment"):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert not [a for a in container["args"] if a.startswith("--record-signing-key")]


def test_two_releases_in_one_namespace_publish_their_keys_apart(helm):
    """Each release's webhook publishes in its own ConfigMap, its Role names exactly that one,
    its webhook passes it as --record-key-configmap, and its webhook configuration names it for
    kubectl drift (reference §8 "Trust")."""
    published = {}
    for release in ("one", "two"):
        docs = render(release=release)
        fullname = f"{release}-drift-sentinel"
        name = f"{fullname}-record-public-key"
        cm = find(docs, "ConfigMap", name)
        assert cm["metadata"]["namespace"] == NAMESPACE
        role = find(docs, "Role", f"{fullname}-record-key")
        assert [rule["resourceNames"] for rule in role["rules"]] == [[name]]
        webhook = [d for d in find_all(docs, "Deployment") if not is_audit(d)][0]
        args = webhook["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--record-key-configmap={name}" in args
        configuration = find(docs, "ValidatingWebhookConfiguration")
        assert configuration["metadata"]["annotations"]["drift-sentinel.k8s.io/record-key-configmap"] == name
        # The audit only verifies: it publishes nothing.
        audit = [d for d in find_all(docs, "Deployment") if is_audit(d)][0]
        assert not [a for a in audit["spec"]["template"]["spec"]["containers"][0]["args"]
                    if a.startswith("--record-key-configmap")]
        published[release] = name
    assert published["one"] != published["two"]
    # With cert-manager the annotation sits next to cainjector's.
    cm_docs = render(sets=["certManager.enabled=true"])
    annotations = find(cm_docs, "ValidatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations["drift-sentinel.k8s.io/record-key-configmap"] == f"{FULLNAME}-record-public-key"
    assert "cert-manager.io/inject-ca-from" in annotations


def test_previous_record_keys_are_mounted_for_both_pods(helm, tmp_path):
    old = [base64.b64encode(bytes([i]) * 32).decode() for i in (1, 2)]
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"events": {"recordKey": {"previousPublicKeys": old}}}))
    docs = render(values=[values])
    cm = find(docs, "ConfigMap", f"{FULLNAME}-record-verify-keys")
    assert cm["data"]["keys"].split() == old
    deployments = find_all(docs, "Deployment")
    assert len(deployments) == 2
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "record-verify-keys"]
        assert volume["configMap"]["name"] == f"{FULLNAME}-record-verify-keys"
        container = pod["containers"][0]
        assert "--record-verify-keys=/record-verify-keys/keys" in container["args"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "record-verify-keys"]
        assert mount == {"name": "record-verify-keys", "mountPath": "/record-verify-keys", "readOnly": True}
    # Not a key, or more than 16: rendering fails naming the value and the fix.
    # (values, what the error says)
    cases = [
        (["not-a-key"], "events.recordKey.previousPublicKeys[0] is not an Ed25519 public key"),
        ([old[0], base64.b64encode(b"x" * 31).decode()], "previousPublicKeys[1] is not an Ed25519 public key"),
        ([base64.b64encode(bytes([i]) * 32).decode() for i in range(17)], "lists 17 keys, at most 16"),
    ]
    for keys, message in cases:
        values.write_text(yaml.safe_dump({"events": {"recordKey": {"previousPublicKeys": keys}}}))
        out = render_text(values=[values], check=False)
        assert out.returncode != 0 and message in out.stderr, out.stderr



def test_webhook_configuration_defaults(helm):
    hook = admission_hook(render())
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert 1 <= hook["timeoutSeconds"] <= 30
    assert hook["clientConfig"]["service"] == {"name": FULLNAME, "namespace": NAMESPACE,
                                               "path": "/validate", "port": 443}
    assert hook["rules"] == [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
         "resources": ["deployments", "statefulsets", "daemonsets"], "scope": "Namespaced"},
        {"apiGroups": ["argoproj.io"], "apiVersions": ["v1alpha1"], "operations": ["UPDATE"],
         "resources": ["rollouts"], "scope": "Namespaced"},
    ]


@pytest.mark.parametrize("namespace,extra", [
    (NAMESPACE, []),
    ("platform", ["webhook.excludeNamespaces={team-a,kube-system}"]),
])
def test_webhook_never_intercepts_its_namespace_nor_kube_system(helm, namespace, extra):
    docs = render(namespace=namespace, sets=extra)
    hook = admission_hook(docs)
    exprs = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn", "values": ["false"]} in exprs
    (names,) = [e for e in exprs if e["key"] == "kubernetes.io/metadata.name"]
    assert names["operator"] == "NotIn"
    assert namespace in names["values"] and "kube-system" in names["values"]
    assert len(names["values"]) == len(set(names["values"]))
    assert "matchLabels" not in hook["namespaceSelector"]


def test_intercept_scale_adds_scale_subresources(helm):
    hook = admission_hook(render(sets=["webhook.interceptScale=true"]))
    resources = [r for rule in hook["rules"] for r in rule["resources"]]
    assert resources == ["deployments", "statefulsets", "daemonsets", "deployments/scale",
                         "statefulsets/scale", "rollouts", "rollouts/scale"]


def test_intercept_scale_lets_the_agent_read_scaled_workloads(helm):
    def reads(sets):
        role = find(render(sets=sets), "ClusterRole")
        return {(group, resource) for rule in role["rules"] if "get" in rule["verbs"]
                for group in rule["apiGroups"] for resource in rule["resources"]}
    assert ("apps", "deployments") not in reads([])
    granted = reads(["webhook.interceptScale=true"])
    for wanted in [("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets"),
                   ("argoproj.io", "rollouts")]:
        assert wanted in granted


def test_default_rule_configmap_is_the_file_the_agent_embeds(helm):
    cm = find(render(), "ConfigMap", f"{FULLNAME}-default-rule")
    assert cm["metadata"]["annotations"] == {"drift-sentinel.k8s.io/rule": "true"}
    assert cm["data"]["spec"] == (CHART / "files" / "default-rule.yaml").read_text()
    source = (REPO / "agent" / "src" / "rules_source.rs").read_text()
    assert 'include_str!("../../charts/drift-sentinel/files/default-rule.yaml")' in source


@pytest.mark.parametrize("mode", ["warn", "dry-run", "off", "enforce"])
def test_default_rule_mode_override(helm, mode):
    spec = find(render(sets=[f"defaultRule.mode={mode}"]), "ConfigMap", f"{FULLNAME}-default-rule")["data"]["spec"]
    parsed = yaml.safe_load(spec)
    assert parsed["mode"] == mode
    file_rule = yaml.safe_load((CHART / "files" / "default-rule.yaml").read_text())
    assert {k: v for k, v in parsed.items() if k != "mode"} == {k: v for k, v in file_rule.items() if k != "mode"}


def test_release_name_containing_chart_name_is_not_repeated(helm):
    docs = render(release="drift-sentinel")
    assert find(docs, "Deployment")["metadata"]["name"] == "drift-sentinel"
    assert tls_secret(docs)["metadata"]["name"] == "drift-sentinel-cert"


# --- invalid values fail ---------------------------------------------------------------------------


@pytest.mark.parametrize("sets,message", [
    (["webhook.failurePolicy=Maybe"], "failurePolicy"),
    (["unknownTopLevel=1"], "unknownTopLevel"),
    (["webhook.unknown=1"], "unknown"),
    (["replicaCount=two"], "replicaCount"),
    (["replicaCount=0"], "replicaCount"),
    (["webhook.timeoutSeconds=31"], "timeoutSeconds"),
    (["webhook.interceptScale=maybe"], "interceptScale"),
    (["webhook.rules[0].operations={PATCH}"], "operations"),
    (["webhook.matchPolicy=Fuzzy"], "matchPolicy"),
    (["webhook.excludeNamespaces={Not_A_Namespace}"], "excludeNamespaces"),
    (["image.pullPolicy=Sometimes"], "pullPolicy"),
    (["logLevel=TRACE"], "logLevel"),
    (["defaultRule.enabled=yes-please"], "enabled"),
    (["defaultRule.mode=audit"], "mode"),
    (["podAnnotations=notamap"], "podAnnotations"),
    (["resources.requests.cpu=lots"], "resources"),
    (["service.port=70000"], "port"),
    (["rules[0].name=r"], "spec"),
    (["rules[0].name=Bad_Name", "rules[0].spec=mode: enforce"], "name"),
    (["certificate.validityDays=0"], "validityDays"),
    (["webhook.rules=null"], "rules"),
    (["webhook.rules[0].resources={}"], "resources"),
])
def test_invalid_values_fail_rendering(helm, sets, message):
    out = render_text(sets=sets, check=False)
    assert out.returncode != 0, f"rendered with {sets}"
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("args,message", [
    (["--set-json", 'env=[{"name":"DRIFT_SENTINEL_ADDRESS","value":":9000"}]'],
     "env[0] sets DRIFT_SENTINEL_ADDRESS, which the chart wires itself; set service.targetPort"),
    (["--set-json", 'env=[{"name":"A","value":"1"},{"name":"DRIFT_SENTINEL_TLS_KEY_FILE","value":"/k"}]'],
     "env[1] sets DRIFT_SENTINEL_TLS_KEY_FILE, which the chart wires itself; set tls.keyFile"),
    (["--set-json", 'env=[{"name":"DRIFT_SENTINEL_AUDIT_CHANNEL","value":"x"}]'], "set audit.channel"),
    (["--set-json", 'env=[{"name":"X","value":"1"},{"name":"X","value":"2"}]'], "env[1] sets X a second time"),
    (["--set-json", 'env=[{"value":"1"}]'], "name"),
    (["--set-json", 'env=[{"name":"X","value":"1","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]'], "/env/0"),
    (["--set", "tls.certFile=tls.crt"], "certFile"),
    (["--set", "tls.keyFile=/other/tls.key"], 'tls.certFile "/tls/tls.crt" and tls.keyFile "/other/tls.key" must be in the same directory'),
    (["--set", "tls.certFile=/tls/tls.key"], "must be different files"),
    (["--set", "tls.certFile=/tmp/tls.crt", "--set", "tls.keyFile=/tmp/tls.key"], "would hide the pod's root or scratch directory /tmp"),
    (["--set", "enableAdmissionViolationExport=true", "--set", "tls.certFile=/tmp/violations/tls/a.crt",
      "--set", "tls.keyFile=/tmp/violations/tls/a.key"], "would hide the pod's root or scratch directory"),
    (["--set", "enableAdmissionViolationExport=true", "--set", "tls.certFile=/data/a.crt", "--set", "tls.keyFile=/data/a.key",
      "--set", "audit.exportVolumeMount.path=/data/export", "--set", "audit.exportConnection.path=/data/export/topics"],
     'tls.certFile "/data/a.crt" and audit.exportVolumeMount.path "/data/export" overlap'),
    (["--set", "service.targetPort=9090"], "targetPort"),
    (["--set", "service.targetPort=0"], "targetPort"),
    (["--set", "webhook.namespaceSelector.operator=Maybe"], "operator"),
    (["--set", "webhook.namespaceSelector.key=not a key"], "key"),
    (["--set-json", "webhook.namespaceSelector.values=[]"], "webhook.namespaceSelector.values must not be empty with operator NotIn"),
    (["--set-json", 'webhook.matchConditions=[{"name":"a","expression":"true"},{"name":"a","expression":"false"}]'],
     'webhook.matchConditions[1].name "a" is used twice'),
    (["--set-json", 'webhook.matchConditions=[{"name":"a"}]'], "expression"),
    (["--set-json", 'webhook.matchConditions=[{"name":"not valid!","expression":"true"}]'], "name"),
    (["--set-json", 'networkPolicy.from=[{"namespace":"x"}]'], "from"),
    (["--set", "metrics.serviceMonitor.interval=soon"], "interval"),
    (["--set", "metrics.prometheusRule.latencyThresholdSeconds=0"], "latencyThresholdSeconds"),
    (["--set", "metrics.prometheusRule.runbookBaseUrl=docs/operations.md"], "runbookBaseUrl"),
    (["--set", "metrics.grafanaDashboard.labelValue=not valid"], "labelValue"),
    (["--set", "certManager.issuerRef.name=Bad_Name"], "name"),
    (["--set", "certManager.enabled=maybe"], "enabled"),
    (["--set-json", 'topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"x","whenUnsatisfiable":"Sometimes"}]'],
     "whenUnsatisfiable"),
    (["--set", "priorityClassName=1"], "priorityClassName"),
])
def test_invalid_new_values_fail_rendering_naming_the_value(helm, args, message):
    out = render_text(*args, check=False)
    assert out.returncode != 0, f"rendered with {args}"
    assert message in out.stderr, out.stderr


def test_global_values_from_a_parent_chart_are_accepted(helm):
    render(sets=["global.imageRegistry=example.com"])


# --- Kubernetes schemas ------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("values", [[], [VALUES_ALL], [VALUES_ALL, VALUES_ALL_CRDS]],
                         ids=["defaults", "all-values", "all-values-crds"])
def test_every_document_validates_against_kubernetes_schemas(helm, version, values, tmp_path):
    """Rendered for that Kubernetes version (`--kube-version`): built-in kinds against its schemas,
    the kinds of cert-manager and the Prometheus Operator against their CRDs (operator_kinds)."""
    sets = []
    if version.startswith("1.25."):
        # webhook.matchConditions needs 1.28 (test_match_conditions_need_kubernetes_1_28).
        sets = ["webhook.matchConditions=null"]
    docs = render("--kube-version", ".".join(version.split(".")[:3]), values=values, sets=sets)
    assert docs
    seen = set()
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        seen.add(key)
        if (doc["apiVersion"].rpartition("/")[0], doc["kind"]) in CUSTOM_KINDS:
            continue  # a kind of the chart's crds/: see CUSTOM_KINDS
        if key in operator_kinds.MODELS:
            operator_kinds.validate(doc)
            continue
        # strict: unknown fields are errors too. Every other kind is a built-in one, so nothing
        # else is skipped: a missing schema raises SchemaNotFoundError and fails the test.
        validate_k8s(doc, version)
    if VALUES_ALL_CRDS in values:
        assert {("cert-manager.io/v1", "Certificate"), ("monitoring.coreos.com/v1", "ServiceMonitor"),
                ("monitoring.coreos.com/v1", "PrometheusRule")} <= seen


def test_a_broken_document_fails_kubernetes_validation(helm):
    """The validation above can fail: a ValidatingWebhookConfiguration with a misspelled field."""
    hook = copy.deepcopy(find(render(), "ValidatingWebhookConfiguration"))
    hook["webhooks"][0]["failurePolicyy"] = "Fail"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(hook, "1.35.0")
    dep = copy.deepcopy(find(render(), "Deployment"))
    dep["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(dep, "1.35.0")


def test_webhook_url(helm):
    """webhook.url points the webhook at an agent outside the cluster: clientConfig.url with the
    given caBundle (or the generated CA when none is given), no Service reference; valid for
    every Kubernetes version the chart supports."""
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
    url = "https://10.0.0.7:8443/validate"
    docs = render(sets=[f"webhook.url={url}", f"webhook.caBundle={bundle}"])
    config = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
    assert config == {"url": url, "caBundle": bundle}
    docs = render(sets=[f"webhook.url={url}"])
    config = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
    assert set(config) == {"url", "caBundle"}
    assert base64.b64decode(config["caBundle"]).decode() == tls_material(docs)["ca.crt"]
    for version in K8S_VERSIONS:
        for doc in docs:
            if (doc["apiVersion"].split("/")[0], doc["kind"]) not in CUSTOM_KINDS:
                validate_k8s(doc, version)
    # Only HTTPS: the API server calls webhooks over TLS.
    result = render_text(sets=["webhook.url=http://10.0.0.7/validate"], check=False)
    assert result.returncode != 0
    assert "/webhook/url" in result.stderr
