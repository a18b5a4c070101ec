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

from conftest import CHART, FULLNAME, NAMESPACE, REPO, TESTS, find, find_all, render, render_text, run_helm, \
    tls_material

VALUES_ALL = TESTS / "values-all.yaml"
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
ALL = yaml.safe_load(VALUES_ALL.read_text())
# Kubernetes versions whose schemas every rendered document must satisfy (strict: no unknown
# fields): the oldest the chart declares (kubeVersion >=1.25) and the newest known.
K8S_VERSIONS = ["1.25.0", "1.35.0", kubernetes_validate.latest_version() + ".0"]
# Values whose content is free-form Kubernetes structure: a leaf as a whole.
FREE_FORM = {"resources"}
# Values that values-all.yaml must keep at their default, and why (test_chart_export.py covers
# their other values).
AT_DEFAULT = {
    "exportBackend": "disk is the only backend while enableAdmissionViolationExport is on",
    "audit.exportVolumeMount.path": "must strictly contain audit.exportConnection.path and its default; "
                                    "the only other such directory, /tmp, is the chart's scratch volume",
    "webhook.url": "the agent tests of values-all call the agent through the Service with the generated "
                   "CA; test_webhook_url covers it",
    "webhook.caBundle": "only used with webhook.url; test_webhook_url covers it",
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
        if isinstance(value, dict) and value and path[0] not in FREE_FORM:
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


def masked(text: str) -> str:
    """Rendered text with the generated certificate material replaced by what the values decide
    of it (it is new on every render): the serving certificate's names and lifetime."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    cert = x509.load_pem_x509_certificate(tls_material(docs)["tls.crt"].encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    lifetime = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    text = re.sub(r'((?:ca\.crt|tls\.crt|tls\.key|caBundle): )"[A-Za-z0-9+/=]+"', r"\1<pem>", text)
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
        ("Deployment", FULLNAME),
        ("PodDisruptionBudget", FULLNAME),
        ("Secret", f"{FULLNAME}-cert"),
        ("Service", FULLNAME),
        ("ServiceAccount", FULLNAME),
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
        variant = copy.deepcopy(ALL)
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
        if masked(other.stdout) == base:
            no_effect.append(dotted)
    assert not missing, f"values not set in values-all.yaml: {missing}"
    assert not undocumented, f"values not documented in docs/install.md: {undocumented}"
    assert not no_effect, f"values without effect on the render: {no_effect}"


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
    assert "--log-level=DEBUG" in c["args"]
    assert c["args"][-2:] == ["--watch-resync=1m", "--startup-sync-timeout=45s"]
    assert dep["spec"]["template"]["metadata"]["annotations"] == ALL["podAnnotations"]
    assert c["resources"] == ALL["resources"]
    assert pod["nodeSelector"] == ALL["nodeSelector"]
    assert pod["tolerations"] == ALL["tolerations"]
    assert pod["affinity"] == ALL["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert dep["metadata"]["labels"]["app.kubernetes.io/name"] == "sentinel"
    svc = find(docs, "Service", name)
    assert svc["spec"]["ports"][0]["port"] == 8443
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
    names = hook["namespaceSelector"]["matchExpressions"][1]
    assert names["values"] == [NAMESPACE, "kube-system", "monitoring", "cert-manager"]
    rules = {d["metadata"]["name"]: d for d in find_all(docs, "ConfigMap")}
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
    assert "ConfigMap" not in kinds and "ServiceAccount" not in kinds and "PodDisruptionBudget" not in kinds
    assert find(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "default"
    # A single replica gets no PodDisruptionBudget (minAvailable 1 would block every drain).
    assert not find_all(render(sets=["replicaCount=1"]), "PodDisruptionBudget")


def test_deployment_is_hardened_and_probed_over_https(helm):
    dep = find(render(), "Deployment")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
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
    # The Service sends the webhook's port to the container's HTTPS port.
    svc = find(render(), "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == port["name"]
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


def test_webhook_configuration_defaults(helm):
    (hook,) = find(render(), "ValidatingWebhookConfiguration")["webhooks"]
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
    (hook,) = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    exprs = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn", "values": ["false"]} in exprs
    (names,) = [e for e in exprs if e["key"] == "kubernetes.io/metadata.name"]
    assert names["operator"] == "NotIn"
    assert namespace in names["values"] and "kube-system" in names["values"]
    assert len(names["values"]) == len(set(names["values"]))
    assert "matchLabels" not in hook["namespaceSelector"]


def test_intercept_scale_adds_scale_subresources(helm):
    (hook,) = find(render(sets=["webhook.interceptScale=true"]), "ValidatingWebhookConfiguration")["webhooks"]
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
    cm = find(render(), "ConfigMap")
    assert cm["metadata"]["annotations"] == {"drift-sentinel.k8s.io/rule": "true"}
    assert cm["data"]["spec"] == (CHART / "files" / "default-rule.yaml").read_text()
    source = (REPO / "agent" / "src" / "rules_source.rs").read_text()
    assert 'include_str!("../../charts/drift-sentinel/files/default-rule.yaml")' in source


@pytest.mark.parametrize("mode", ["warn", "dry-run", "off", "enforce"])
def test_default_rule_mode_override(helm, mode):
    spec = find(render(sets=[f"defaultRule.mode={mode}"]), "ConfigMap")["data"]["spec"]
    parsed = yaml.safe_load(spec)
    assert parsed["mode"] == mode
    file_rule = yaml.safe_load((CHART / "files" / "default-rule.yaml").read_text())
    assert {k: v for k, v in parsed.items() if k != "mode"} == {k: v for k, v in file_rule.items() if k != "mode"}


def test_release_name_containing_chart_name_is_not_repeated(helm):
    docs = render(release="drift-sentinel")
    assert find(docs, "Deployment")["metadata"]["name"] == "drift-sentinel"
    assert find(docs, "Secret")["metadata"]["name"] == "drift-sentinel-cert"


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


def test_global_values_from_a_parent_chart_are_accepted(helm):
    render(sets=["global.imageRegistry=example.com"])


# --- Kubernetes schemas ------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("values", [[], [VALUES_ALL]], ids=["defaults", "all-values"])
def test_every_document_validates_against_kubernetes_schemas(helm, version, values):
    docs = render(values=values)
    assert docs
    for doc in docs:
        if (doc["apiVersion"].rpartition("/")[0], doc["kind"]) in CUSTOM_KINDS:
            continue  # a kind of the chart's crds/: see CUSTOM_KINDS
        # strict: unknown fields are errors too. Every other kind is a built-in one, so nothing
        # else is skipped: a missing schema raises SchemaNotFoundError and fails the test.
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_broken_document_fails_kubernetes_validation(helm):
    """The validation above can fail: a ValidatingWebhookConfiguration with a misspelled field."""
    hook = copy.deepcopy(find(render(), "ValidatingWebhookConfiguration"))
    hook["webhooks"][0]["failurePolicyy"] = "Fail"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(hook, "1.35.0", strict=True)
    dep = copy.deepcopy(find(render(), "Deployment"))
    dep["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, "1.35.0", strict=True)


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
                kubernetes_validate.validate(doc, version, strict=True)
    # Only HTTPS: the API server calls webhooks over TLS.
    result = render_text(sets=["webhook.url=http://10.0.0.7/validate"], check=False)
    assert result.returncode != 0
    assert "/webhook/url" in result.stderr
