"""Users of the original Go drift-sentinel chart (1.0.3) switch without surprises (reference §10, issue
18): its values keep working with the same meaning. values-original.yaml is a values file written
for that chart (every value below, not at its default); it renders with this chart to the same
effect — the Service's targetPort and the container port, the webhook's namespaceSelector, the TLS
paths with the Secret mounted there, the extra environment variables (in the container and in
effect: the real agent runs with the rendered args and env), the resources."""

from __future__ import annotations

import copy
import http.client
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import validate_k8s, CHART, NAMESPACE, TESTS, find, find_all, free_port, render, tls_material, with_record_key

ORIGINAL = TESTS / "values-original.yaml"
VALUES = yaml.safe_load(ORIGINAL.read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
FULLNAME = "ds-drift-sentinel"

# The original chart's values that keep their meaning, and their defaults there (and here).
ORIGINAL_DEFAULTS = {
    ("service", "port"): 443,
    ("service", "targetPort"): 8443,
    ("webhook", "failurePolicy"): "Fail",
    ("webhook", "timeoutSeconds"): 10,
    ("webhook", "namespaceSelector"): {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn",
                                       "values": ["false"]},
    ("webhook", "rules"): DEFAULTS["webhook"]["rules"],
    ("tls", "certFile"): "/tls/tls.crt",
    ("tls", "keyFile"): "/tls/tls.key",
    ("resources",): {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "250m", "memory": "256Mi"}},
    ("podDisruptionBudget", "minAvailable"): 1,
    ("env",): [],
    ("defaultRule", "enabled"): True,
    ("rules",): [],
    ("nodeSelector",): {},
    ("tolerations",): [],
    ("affinity",): {},
    ("serviceAccount", "create"): True,
    ("serviceAccount", "name"): "",
}


def get(values: dict, path: tuple):
    for key in path:
        values = values[key]
    return values


def container(docs):
    (c,) = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


@pytest.fixture(scope="module")
def docs():
    return render(values=[ORIGINAL])


def test_the_original_defaults_are_this_charts_defaults():
    for path, default in ORIGINAL_DEFAULTS.items():
        assert get(DEFAULTS, path) == default, ".".join(path)
    # replicaCount: the original's fixed number is now chosen by failurePolicy (docs/install.md).
    assert DEFAULTS["replicaCount"] is None


def test_the_original_values_file_sets_every_value_to_something_else():
    for path, default in ORIGINAL_DEFAULTS.items():
        assert get(VALUES, path) != default, f"{'.'.join(path)} is at its default in values-original.yaml"
    assert VALUES["replicaCount"] not in (None, 2, 3)


def test_it_renders_and_validates(helm, docs):
    for doc in docs:
        for version in ("1.25.0", kubernetes_validate.latest_version()):
            validate_k8s(doc, version)


def test_service_target_port_is_the_container_port_and_the_agent_address(helm, docs):
    svc = find(docs, "Service")
    (port,) = svc["spec"]["ports"]
    assert port["port"] == 9443 and port["targetPort"] == 9444
    c = container(docs)
    assert c["ports"] == [{"name": "https", "containerPort": 9444, "protocol": "TCP"}]
    assert "--address=:9444" in c["args"]
    # The probes ask that port (by its name), over HTTPS; the webhook calls the Service's port.
    assert c["readinessProbe"]["httpGet"]["port"] == "https" == c["livenessProbe"]["httpGet"]["port"]
    hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["service"]["port"] == 9443


def test_namespace_selector_expression_replaces_the_default_and_exclusions_stay(helm, docs):
    hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    exprs = hook["namespaceSelector"]["matchExpressions"]
    assert exprs[0] == {"key": "drift-sentinel.example.com/protect", "operator": "In", "values": ["true", "strict"]}
    assert not [e for e in exprs if e["key"] == "drift-sentinel.k8s.io/enabled"], "the default expression stays"
    (names,) = [e for e in exprs if e["key"] == "kubernetes.io/metadata.name"]
    assert names == {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE, "kube-system"]}
    assert len(exprs) == 2
    # The default: opt-out by namespace label, plus the exclusions.
    default_exprs = find(render(), "ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"][
        "matchExpressions"]
    assert default_exprs[0] == {"key": "drift-sentinel.k8s.io/enabled", "operator": "NotIn", "values": ["false"]}
    # Exists / DoesNotExist take no values (those merged from the default are dropped).
    exists = find(render(sets=["webhook.namespaceSelector.key=team", "webhook.namespaceSelector.operator=Exists"]),
                  "ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]
    assert exists == {"key": "team", "operator": "Exists"}
    # And webhook.excludeNamespaces adds to the exclusions, never to the user's expression.
    extra = find(render(values=[ORIGINAL], sets=["webhook.excludeNamespaces={legacy}"]),
                 "ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert extra[0] == exprs[0] and extra[1]["values"] == [NAMESPACE, "kube-system", "legacy"]


def test_tls_paths_with_the_secret_mounted_there(helm, docs):
    c = container(docs)
    assert "--tls-cert-file=/etc/drift-sentinel/certs/server.pem" in c["args"]
    assert "--tls-key-file=/etc/drift-sentinel/certs/server-key.pem" in c["args"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    assert mount == {"name": "tls", "mountPath": "/etc/drift-sentinel/certs", "readOnly": True}
    pod = find(docs, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == f"{FULLNAME}-cert"
    assert volume["secret"]["items"] == [{"key": "tls.crt", "path": "server.pem"},
                                         {"key": "tls.key", "path": "server-key.pem"}]
    assert {"tls.crt", "tls.key"} <= set(find(docs, "Secret", f"{FULLNAME}-cert")["data"])


def test_env_is_in_the_container_and_no_flag_overrides_it(helm, docs):
    c = container(docs)
    names = [e["name"] for e in c["env"]]
    assert len(names) == len(set(names)), names
    env = {e["name"]: e for e in c["env"]}
    assert env["DRIFT_SENTINEL_LOG_LEVEL"] == {"name": "DRIFT_SENTINEL_LOG_LEVEL", "value": "DEBUG"}
    assert env["DRIFT_SENTINEL_WATCH_RESYNC"] == {"name": "DRIFT_SENTINEL_WATCH_RESYNC", "value": "45s"}
    for name in env:
        flag = "--" + name.removeprefix("DRIFT_SENTINEL_").lower().replace("_", "-")
        assert not [a for a in c["args"] if a == flag or a.startswith(flag + "=")], f"{flag} overrides {name}"
    # Without env, the chart passes logLevel in the same variable, not as a flag.
    default = container(render())
    assert {"name": "DRIFT_SENTINEL_LOG_LEVEL", "value": "INFO"} in default["env"]
    assert not [a for a in default["args"] if a.startswith("--log-level")]


def test_resources_and_the_other_original_values(helm, docs):
    c = container(docs)
    assert c["resources"] == VALUES["resources"]
    assert container(render())["resources"] == ORIGINAL_DEFAULTS[("resources",)]
    dep = find(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 4
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    assert pod["serviceAccountName"] == "drift-sentinel-sa" and not find_all(docs, "ServiceAccount")
    assert find(docs, "ClusterRoleBinding")["subjects"][0]["name"] == "drift-sentinel-sa"
    assert pod["nodeSelector"] == VALUES["nodeSelector"]
    assert pod["tolerations"] == VALUES["tolerations"]
    assert pod["affinity"] == VALUES["affinity"]
    hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 15
    assert hook["rules"] == VALUES["webhook"]["rules"]
    # The default rule is off; the one rule of `rules` (the other ConfigMap is the last-good store).
    (rule,) = [cm for cm in find_all(docs, "ConfigMap")
               if cm["metadata"].get("annotations", {}).get("drift-sentinel.k8s.io/rule") == "true"]
    assert rule["metadata"]["name"] == "protect-payments"
    assert rule["data"]["spec"] == VALUES["rules"][0]["spec"]


# --- the env in effect: the real agent with the rendered args and env ----------------------------


def run_rendered_agent(agent_binary: Path, docs: list[dict], tmp_path: Path) -> str:
    """Runs the agent with the rendered container's args and env as the kubelet would give them:
    the Secret's keys projected to the mount's file names (under tmp_path instead of the pod's
    root), fieldRefs resolved. Offline (`--rules` with the rendered rule ConfigMaps, added as the
    last flag) and on loopback. Makes one connection that fails its TLS handshake, and one good
    request; returns the log."""
    c = container(docs)
    pod = find(docs, "Deployment")["spec"]["template"]["spec"]
    tls = tls_material(docs)
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    mount_dir = tmp_path / "pod" / mount["mountPath"].lstrip("/")
    mount_dir.mkdir(parents=True)
    items = volume["secret"].get("items") or [{"key": k, "path": k} for k in ("ca.crt", "tls.crt", "tls.key")]
    for item in items:
        (mount_dir / item["path"]).write_text(tls[item["key"]])
    port, admin = free_port(), free_port()
    container_port = c["ports"][0]["containerPort"]
    args = []
    for arg in c["args"]:
        if arg == f"--address=:{container_port}":
            arg = f"--address=127.0.0.1:{port}"
        args.append(arg.replace(f"={mount['mountPath']}/", f"={mount_dir}/"))
    assert f"--address=127.0.0.1:{port}" in args, c["args"]
    args = with_record_key(docs, args, tmp_path)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump_all(find_all(docs, "ConfigMap")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_SENTINEL_") and k != "KUBECONFIG"}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env[e["name"]] = {"metadata.name": f"{FULLNAME}-0", "metadata.namespace": NAMESPACE}[
                e["valueFrom"]["fieldRef"]["fieldPath"]]
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(agent_binary), *args, "--admin-address", f"127.0.0.1:{admin}",
                                    "--rules", str(rules)], stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            service = f"{FULLNAME}.{NAMESPACE}.svc"
            context = ssl.create_default_context(cadata=tls["ca.crt"])
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, log_path.read_text()
                try:
                    conn = http.client.HTTPSConnection(service, port, context=context, timeout=5)
                    conn._create_connection = lambda addr, *a, **k: socket.create_connection(("127.0.0.1", port), *a, **k)
                    conn.request("GET", c["readinessProbe"]["httpGet"]["path"])
                    if conn.getresponse().status == 200:
                        conn.close()
                        break
                    conn.close()
                except OSError:
                    pass
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
            # A client that does not speak TLS: the agent logs the failed handshake at DEBUG.
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                try:
                    raw.recv(1024)
                except OSError:
                    pass
            time.sleep(0.5)
        finally:
            process.terminate()
            process.wait(timeout=15)
    return log_path.read_text()


def levels(log: str) -> list[str]:
    import json
    out = []
    for line in log.splitlines():
        try:
            out.append(json.loads(line)["level"])
        except (ValueError, KeyError):
            continue
    return out


def test_env_takes_effect_in_the_real_agent(helm, agent_binary, docs, tmp_path):
    log = run_rendered_agent(agent_binary, docs, tmp_path / "debug")
    assert "DEBUG" in levels(log), log[-3000:]
    assert "TLS handshake failed" in log
    # The control: the same render without the env entry logs at the chart's INFO, so it is the
    # env entry that turned DEBUG on.
    values = copy.deepcopy(VALUES)
    values["env"] = [e for e in values["env"] if e["name"] != "DRIFT_SENTINEL_LOG_LEVEL"]
    (tmp_path / "info.yaml").write_text(yaml.safe_dump(values))
    log = run_rendered_agent(agent_binary, render(values=[tmp_path / "info.yaml"]), tmp_path / "info")
    assert levels(log) and "DEBUG" not in levels(log), log[-3000:]
    assert "listening" in log
