"""The chart's rules and TLS material, fed to the real agent binary.

The agent serves HTTPS with the Secret the chart rendered, and is called exactly as the API server
calls it: AdmissionReview JSON posted to /validate, over TLS that trusts only the rendered caBundle
and checks the Service's DNS name. Updates are made with the real kubectl (`apply`, `set image`,
`rollout restart`, `annotate`) against an API server double that applies kubectl's patches, sends
the reviews the rendered ValidatingWebhookConfiguration selects, and answers denials as the API
server does; the Deployment controller's revision bump is a PUT as that controller makes it.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import ssl
import subprocess
import time
import uuid

import pytest
import yaml

from apiserver_double import APIServerDouble
from conftest import FULLNAME, NAMESPACE, TESTS, find, find_all, free_port, render, render_text, \
    running_agent, tls_material, tls_secret, with_record_key

WEBHOOK = "validate.drift-sentinel.k8s.io"
CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"
ADMIN = "kubernetes-admin"

MANIFEST = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web", "team": "checkout"}},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "initContainers": [{"name": "migrate", "image": "registry.example.com/shop/web:1.4.2",
                                    "command": ["/migrate"]}],
                "containers": [
                    {
                        "name": "web",
                        "image": "registry.example.com/shop/web:1.4.2",
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "env": [{"name": "MODE", "value": "production"}],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    },
                    {"name": "proxy", "image": "envoyproxy/envoy:v1.31.0"},
                ],
            },
        },
    },
}


def with_changes(manifest: dict, **changes) -> dict:
    m = copy.deepcopy(manifest)
    if "image" in changes:
        m["spec"]["template"]["spec"]["containers"][0]["image"] = changes["image"]
    if "replicas" in changes:
        m["spec"]["replicas"] = changes["replicas"]
    if "namespace" in changes:
        m["metadata"]["namespace"] = changes["namespace"]
    return m


# --- fixtures -------------------------------------------------------------------------------------


def start_agent(agent_binary, tmp_path_factory, sets=()):
    docs = render(sets=list(sets))
    workdir = tmp_path_factory.mktemp("agent")
    rule_file = workdir / "default-rule-configmap.yaml"
    # Exactly the rendered default rule ConfigMap, as `helm template --show-only` prints it.
    rule_file.write_text(render_text("--show-only", "templates/default-rule.yaml", sets=list(sets)).stdout)
    return docs, running_agent(agent_binary, workdir, [rule_file], tls_material(docs))


@pytest.fixture(scope="module")
def chart_agent(agent_binary, tmp_path_factory):
    docs, agent_cm = start_agent(agent_binary, tmp_path_factory)
    with agent_cm as agent:
        yield docs, agent


class Cluster:
    """The API server double wired to the agent through the rendered webhook configuration."""

    def __init__(self, double: APIServerDouble, kubectl: str, tmp_path):
        self.double = double
        self.kubectl_bin = kubectl
        self.tmp = tmp_path

    def kubectl(self, *args: str, stdin: str | None = None, user: str = ADMIN) -> subprocess.CompletedProcess:
        env = {**os.environ, "KUBECONFIG": self.double.kubeconfig(str(self.tmp), user),
               "KUBECACHEDIR": str(self.tmp / "kube-cache")}
        return subprocess.run([self.kubectl_bin, *args], input=stdin, capture_output=True, text=True,
                              timeout=120, env=env)

    def apply(self, manifest: dict) -> subprocess.CompletedProcess:
        # --validate=false: the double serves no OpenAPI document (kubectl then computes the same
        # strategic merge patch from its built-in types).
        return self.kubectl("apply", "--validate=false", "-f", "-", stdin=json.dumps(manifest))

    def deployment(self, namespace: str = "shop", name: str = "web") -> dict:
        return self.double.get("apps/v1", "deployments", namespace, name)

    def put(self, obj: dict, user: str) -> tuple[int, dict]:
        meta = obj["metadata"]
        path = self.double.object_path("apps/v1", "deployments", meta["namespace"], meta["name"])
        conn = http.client.HTTPConnection("127.0.0.1", self.double.port, timeout=30)
        try:
            conn.request("PUT", path, body=json.dumps(obj),
                         headers={"Content-Type": "application/json", "Authorization": f"Bearer {user}"})
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def last_review(self) -> tuple[dict, dict]:
        assert self.double.reviews, "no AdmissionReview was sent to the webhook"
        return self.double.reviews[-1]


def make_cluster(docs, agent_port, kubectl, tmp_path, namespaces=("shop",)) -> Cluster:
    double = APIServerDouble(kubectl)
    double.__enter__()
    double.add_namespace(NAMESPACE)
    double.add_namespace("kube-system")
    double.add_namespace("sandbox", labels={"drift-sentinel.k8s.io/enabled": "false"})
    for ns in namespaces:
        double.add_namespace(ns)
    double.register_webhooks(find(docs, "ValidatingWebhookConfiguration"), agent_port)
    return Cluster(double, kubectl, tmp_path)


@pytest.fixture
def cluster(chart_agent, kubectl, tmp_path):
    docs, agent = chart_agent
    c = make_cluster(docs, agent.port, kubectl, tmp_path)
    created = c.apply(MANIFEST)
    assert created.returncode == 0, created.stderr
    assert not c.double.reviews, "a CREATE must not be sent to the webhook"
    yield c
    c.double.__exit__(None, None, None)


# --- the agent serves the chart's certificate ----------------------------------------------------


def test_agent_serves_the_charts_certificate_and_probes(chart_agent):
    docs, agent = chart_agent
    assert agent.https("GET", "/healthz")[0] == 200
    assert agent.https("GET", "/readyz")[0] == 200
    svc = f"{FULLNAME}.{NAMESPACE}"
    for name in (svc, f"{svc}.svc", f"{svc}.svc.cluster.local"):
        assert agent.https("GET", "/healthz", server_name=name)[0] == 200
    # The certificate is checked: a name it was not issued for fails the handshake.
    with pytest.raises(ssl.SSLCertVerificationError):
        agent.https("GET", "/healthz", server_name="elsewhere.example.com")


def test_agent_loads_exactly_the_default_rule(chart_agent):
    docs, agent = chart_agent
    status = agent.status()
    assert status["rulesInvalid"] == 0, status
    assert [r["rule"] for r in status["rules"]] == [f"{NAMESPACE}/{FULLNAME}-default-rule"]
    assert status["rules"][0]["mode"] == "enforce"


def test_every_rule_the_chart_renders_is_valid_for_the_agent(agent_binary, tmp_path):
    """The whole render of values-all.yaml (default rule in warn mode plus the `rules` entries, one
    given as a YAML string and one as a map) loads without an invalid rule."""
    docs = render(values=[TESTS / "values-all.yaml"])
    rendered = tmp_path / "all.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    with running_agent(agent_binary, tmp_path / "agent", [rendered], tls_material(docs),
                       service=f"drift-guard.{NAMESPACE}.svc") as agent:
        status = agent.status()
    assert status["rulesInvalid"] == 0, status["invalidRules"]
    assert sorted((r["rule"], r["mode"]) for r in status["rules"]) == sorted([
        (f"{NAMESPACE}/drift-guard-default-rule", "warn"),
        ("shop/drift-sentinel-production", "enforce"),
        (f"{NAMESPACE}/replicas-only", "dry-run"),
    ])
    rule_maps = [cm for cm in find_all(docs, "ConfigMap")
                 if cm["metadata"].get("annotations", {}).get("drift-sentinel.k8s.io/rule") == "true"]
    assert len(rule_maps) == 3
    # The other ConfigMaps are the Grafana dashboard, which the agent ignores, and its last-good
    # store (values-all.yaml turns Events off: no record key ConfigMap).
    assert sorted(cm["metadata"]["name"] for cm in find_all(docs, "ConfigMap") if cm not in rule_maps) == [
        "drift-guard-dashboard", "drift-guard-last-good-rules"]


# --- normal operations are allowed; drift is denied ------------------------------------------------


def assert_allowed_by_default_rule(review: tuple[dict, dict]):
    request, response = review
    assert response.get("allowed") is True, response
    assert response["auditAnnotations"]["rule"] == f"{NAMESPACE}/{FULLNAME}-default-rule"
    assert response["auditAnnotations"]["result"] == "allowed"
    assert "denied-paths" not in response["auditAnnotations"]


def test_image_change_by_kubectl_apply_is_allowed(cluster):
    before = cluster.deployment()
    out = cluster.apply(with_changes(MANIFEST, image="registry.example.com/shop/web:1.5.0"))
    assert out.returncode == 0, out.stderr
    assert "configured" in out.stdout
    request, response = cluster.last_review()
    assert_allowed_by_default_rule((request, response))
    assert request["operation"] == "UPDATE" and request["userInfo"]["username"] == ADMIN
    old_applied = request["oldObject"]["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    new_applied = request["object"]["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    assert old_applied != new_applied and "1.5.0" in new_applied and "1.5.0" not in old_applied
    after = cluster.deployment()
    assert after["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":1.5.0")
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1


def test_kubectl_set_image_is_allowed_for_containers_and_init_containers(cluster):
    out = cluster.kubectl("-n", "shop", "set", "image", "deployment/web",
                          "web=registry.example.com/shop/web:2.0.0", "migrate=registry.example.com/shop/web:2.0.0",
                          "proxy=envoyproxy/envoy:v1.32.0")
    assert out.returncode == 0, out.stderr
    assert_allowed_by_default_rule(cluster.last_review())


def test_kubectl_rollout_restart_is_allowed_again_and_again(cluster):
    for attempt in range(2):
        if attempt:
            time.sleep(1.1)  # kubectl refuses a second restart within the same second
        out = cluster.kubectl("-n", "shop", "rollout", "restart", "deployment/web")
        assert out.returncode == 0, out.stderr
        request, response = cluster.last_review()
        assert_allowed_by_default_rule((request, response))
        assert "kubectl.kubernetes.io/restartedAt" in request["object"]["spec"]["template"]["metadata"]["annotations"]
    first, second = cluster.double.reviews[-2][0], cluster.double.reviews[-1][0]
    assert "annotations" not in first["oldObject"]["spec"]["template"]["metadata"]  # added the first time
    assert "kubectl.kubernetes.io/restartedAt" in second["oldObject"]["spec"]["template"]["metadata"]["annotations"]


def test_deployment_controller_revision_bump_is_allowed(cluster):
    cluster.apply(with_changes(MANIFEST, image="registry.example.com/shop/web:1.6.0"))
    live = cluster.deployment()
    bumped = copy.deepcopy(live)
    bumped["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "2"
    bumped["status"] = {"observedGeneration": live["metadata"]["generation"], "replicas": 4, "updatedReplicas": 1}
    code, body = cluster.put(bumped, user=CONTROLLER)
    assert code == 200, body
    request, response = cluster.last_review()
    assert request["userInfo"]["username"] == CONTROLLER
    assert request["oldObject"]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert_allowed_by_default_rule((request, response))
    assert cluster.deployment()["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


def test_replicas_change_by_kubectl_apply_is_denied(cluster):
    before = cluster.deployment()
    out = cluster.apply(with_changes(MANIFEST, replicas=5))
    assert out.returncode != 0
    assert f'admission webhook "{WEBHOOK}" denied the request' in out.stderr
    assert "Drift Sentinel: immutable fields changed: spec.replicas" in out.stderr
    request, response = cluster.last_review()
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["auditAnnotations"]["denied-paths"] == "spec.replicas"
    assert response["auditAnnotations"]["result"] == "denied"
    assert cluster.deployment()["spec"]["replicas"] == 3
    assert cluster.deployment()["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_image_and_replicas_together_are_denied_for_the_replicas(cluster):
    out = cluster.apply(with_changes(MANIFEST, image="registry.example.com/shop/web:1.7.0", replicas=1))
    assert out.returncode != 0
    assert cluster.last_review()[1]["auditAnnotations"]["denied-paths"] == "spec.replicas"


def test_adding_a_sidecar_is_denied(cluster):
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"]["template"]["spec"]["containers"].insert(0, {"name": "debug", "image": "busybox:1.36"})
    out = cluster.apply(manifest)
    assert out.returncode != 0
    assert cluster.last_review()[1]["auditAnnotations"]["denied-paths"] == "spec.template.spec.containers[0]"


# --- ways out: bypass, namespace opt-out, excluded namespaces, failurePolicy ------------------------


def test_bypass_annotation_lets_a_change_through(cluster):
    out = cluster.kubectl("-n", "shop", "annotate", "deployment/web", "drift-sentinel.k8s.io/bypass=true")
    assert out.returncode == 0, out.stderr
    out = cluster.apply(with_changes(MANIFEST, replicas=6))
    assert out.returncode == 0, out.stderr
    assert cluster.last_review()[1]["allowed"] is True
    assert cluster.deployment()["spec"]["replicas"] == 6


@pytest.mark.parametrize("namespace", [NAMESPACE, "kube-system", "sandbox"])
def test_excluded_namespaces_are_never_sent_to_the_webhook(cluster, namespace):
    manifest = with_changes(MANIFEST, namespace=namespace)
    assert cluster.apply(manifest).returncode == 0
    reviews = len(cluster.double.reviews)
    out = cluster.apply(with_changes(manifest, replicas=7))
    assert out.returncode == 0, out.stderr
    assert len(cluster.double.reviews) == reviews
    assert cluster.deployment(namespace)["spec"]["replicas"] == 7


def test_unreachable_webhook_fails_closed_with_the_default_failure_policy(chart_agent, kubectl, tmp_path):
    docs, _ = chart_agent
    c = make_cluster(docs, free_port(), kubectl, tmp_path)  # nobody listens there
    try:
        assert c.apply(MANIFEST).returncode == 0  # CREATE is not intercepted
        out = c.apply(with_changes(MANIFEST, image="registry.example.com/shop/web:9.9.9"))
        assert out.returncode != 0
        assert f'failed calling webhook "{WEBHOOK}"' in out.stderr
    finally:
        c.double.__exit__(None, None, None)


def test_unreachable_webhook_lets_updates_through_with_failure_policy_ignore(chart_agent, kubectl, tmp_path):
    docs = render(sets=["webhook.failurePolicy=Ignore"])
    c = make_cluster(docs, free_port(), kubectl, tmp_path)
    try:
        assert c.apply(MANIFEST).returncode == 0
        out = c.apply(with_changes(MANIFEST, replicas=2))
        assert out.returncode == 0, out.stderr
    finally:
        c.double.__exit__(None, None, None)


def test_default_rule_in_warn_mode_warns_instead_of_denying(agent_binary, kubectl, tmp_path, tmp_path_factory):
    docs, agent_cm = start_agent(agent_binary, tmp_path_factory, sets=["defaultRule.mode=warn"])
    with agent_cm as agent:
        c = make_cluster(docs, agent.port, kubectl, tmp_path)
        try:
            assert c.apply(MANIFEST).returncode == 0
            out = c.apply(with_changes(MANIFEST, replicas=4))
            assert out.returncode == 0, out.stderr
            assert "Warning: Drift Sentinel: immutable fields changed: spec.replicas" in out.stderr
            assert c.last_review()[1]["auditAnnotations"]["result"] == "warned"
            assert c.deployment()["spec"]["replicas"] == 4
        finally:
            c.double.__exit__(None, None, None)


# --- a review posted directly -----------------------------------------------------------------------


def test_direct_review_of_a_statefulset_and_a_daemonset(chart_agent):
    _, agent = chart_agent
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "namespace": "shop", "uid": "u1", "resourceVersion": "5", "generation": 1},
           "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}},
                                 "spec": {"containers": [{"name": "db", "image": "postgres:16.3"}]}}}}
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": "agent", "namespace": "shop",
                       "annotations": {"deprecated.daemonset.template.generation": "1"}},
          "spec": {"selector": {"matchLabels": {"app": "a"}},
                   "template": {"metadata": {"labels": {"app": "a"}},
                                "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}}}

    def review(old, new, resource):
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(uuid.uuid4()), "operation": "UPDATE", "namespace": "shop", "name": old["metadata"]["name"],
            "kind": {"group": "apps", "version": "v1", "kind": old["kind"]},
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "userInfo": {"username": ADMIN}, "object": new, "oldObject": old}}

    new = copy.deepcopy(sts)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "postgres:16.4"
    assert agent.review(review(sts, new, "statefulsets"))["allowed"] is True
    new["spec"]["serviceName"] = "db-headless"
    denied = agent.review(review(sts, new, "statefulsets"))
    assert denied["allowed"] is False and denied["auditAnnotations"]["denied-paths"] == "spec.serviceName"

    new = copy.deepcopy(ds)
    new["metadata"]["annotations"]["deprecated.daemonset.template.generation"] = "2"
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "agent:2"
    assert agent.review(review(ds, new, "daemonsets"))["allowed"] is True


# --- the rendered Deployment's command line, in cluster mode -----------------------------------------


def rbac_grants(docs: list[dict]) -> set[tuple[str, str, str, str | None]]:
    """What the ClusterRole grants, and the Roles in the release namespace (the agent's requests
    of namespaced resources there are checked to stay in that namespace): (group, resource, verb,
    name), the name None where a rule grants every object."""
    granted = set()
    roles = [find(docs, "ClusterRole")] + [r for r in find_all(docs, "Role")
                                           if r["metadata"]["namespace"] == NAMESPACE]
    for rule in (rule for role in roles for rule in role["rules"]):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [None]:
                        granted.add((group, resource, verb, name))
    return granted


def requested_rights(queries: list[tuple[str, str, str]]) -> set[tuple[str, str, str, str | None]]:
    """(group, resource, verb, name) of every resource request, as the API server's authorizer
    sees it."""
    rights = set()
    for method, path, query in queries:
        parsed = APIServerDouble.parse_path(path)
        if parsed is None:
            continue  # discovery (/version, /api, /apis): allowed to every authenticated user
        _, group, _, plural, _, name = parsed
        if name is None:
            verb = {"GET": "watch" if APIServerDouble.is_watch(query) else "list", "POST": "create"}[method]
        else:
            verb = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
        rights.add((group, plural, verb, name))
    return rights


def not_granted(requested: set, granted: set) -> set:
    """The requests no grant allows: neither for every object nor for that object by name."""
    return {(g, r, v, n) for g, r, v, n in requested
            if (g, r, v, None) not in granted and (g, r, v, n) not in granted}


@pytest.mark.parametrize("values", [[], [TESTS / "values-all.yaml"]], ids=["defaults", "all-values"])
def test_agent_runs_with_the_rendered_args_and_rbac_in_cluster_mode(agent_binary, kubectl, tmp_path, values):
    """The container args the chart renders (plus --kubeconfig), against the API server double:
    the agent accepts them, reads the chart's rule ConfigMaps from the API, answers the rendered
    probes over HTTPS with the chart's certificate, records an InvalidRule Event, and makes no
    request that the chart's ClusterRole does not allow."""
    docs = render(values=values)
    tls = tls_material(docs)
    dep = find(docs, "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")["mountPath"]
    # The Secret's keys as the kubelet projects them into the mount (items, or every key).
    secret = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")["secret"]
    for item in secret.get("items") or [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]:
        (tmp_path / item["path"]).write_text(tls[item["key"]])
    port, admin_port = free_port(), free_port()
    args = []
    for arg in container["args"]:
        arg = arg.replace(f"--address=:{container['ports'][0]['containerPort']}", f"--address=127.0.0.1:{port}")
        # Stopped at once: the shutdown the chart sets up is test_chart_shutdown.py's.
        arg = "--shutdown-delay=0s" if arg.startswith("--shutdown-delay=") else arg
        args.append(arg.replace(f"={mount}/", f"={tmp_path}/"))
    args = with_record_key(docs, args, tmp_path)
    assert f"--address=127.0.0.1:{port}" in args
    assert [a for a in args if a.startswith(f"--tls-cert-file={tmp_path}/")]

    with APIServerDouble(kubectl) as double:
        for ns in (NAMESPACE, "shop", "kube-system"):
            double.add_namespace(ns)
        rule_maps = [cm for cm in find_all(docs, "ConfigMap")
                     if cm["metadata"].get("annotations", {}).get("drift-sentinel.k8s.io/rule") == "true"]
        for cm in rule_maps:
            double.put_object(cm, "configmaps")
        double.put_object({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "broken", "namespace": "shop",
                                        "annotations": {"drift-sentinel.k8s.io/rule": "true"}},
                           "data": {"spec": "mode: sometimes\n"}}, "configmaps")
        double.put_object({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "settings", "namespace": "shop"}, "data": {"a": "b"}}, "configmaps")
        double.put_object(tls_secret(docs), "secrets")
        # The ConfigMap the agent keeps the last good rule versions in (the chart creates it).
        (last_good,) = [cm for cm in find_all(docs, "ConfigMap")
                        if cm["metadata"]["name"].endswith("-last-good-rules")]
        double.put_object(last_good, "configmaps")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_SENTINEL_")}
        # The container's env, with what its fieldRefs give in the cluster.
        fields = {"metadata.name": f"{dep['metadata']['name']}-0", "metadata.namespace": NAMESPACE}
        for e in container["env"]:
            env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        assert env["DRIFT_SENTINEL_POD_NAMESPACE"] == NAMESPACE and env["DRIFT_SENTINEL_LOG_LEVEL"]
        with open(tmp_path / "agent.log", "wb") as log:
            process = subprocess.Popen(
                [str(agent_binary), *args, "--kubeconfig", double.kubeconfig(str(tmp_path)),
                 "--admin-address", f"127.0.0.1:{admin_port}"],
                stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                context = ssl.create_default_context(cadata=tls["caBundle"])
                service = f"{dep['metadata']['name']}.{NAMESPACE}.svc"

                def probe(path):
                    conn = http.client.HTTPSConnection(service, port, context=context, timeout=5)
                    conn._create_connection = lambda addr, *a, **k: __import__("socket").create_connection(
                        ("127.0.0.1", port), *a, **k)
                    try:
                        conn.request("GET", path)
                        return conn.getresponse().status
                    finally:
                        conn.close()

                ready = container["readinessProbe"]["httpGet"]["path"]
                deadline = time.monotonic() + 30
                while True:
                    assert process.poll() is None, (tmp_path / "agent.log").read_text()
                    try:
                        if probe(ready) == 200:
                            break
                    except OSError:
                        pass
                    assert time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
                    time.sleep(0.1)
                assert probe(container["livenessProbe"]["httpGet"]["path"]) == 200
                conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=5)
                conn.request("GET", "/status")
                status = json.loads(conn.getresponse().read())
                conn.close()
                deadline = time.monotonic() + 10
                while not any(p.endswith("/events") for _, p in double.requests):
                    assert time.monotonic() < deadline, "no InvalidRule event was recorded"
                    time.sleep(0.1)
            finally:
                process.terminate()
                process.wait(timeout=15)
        requests = list(double.queries)
        # What only a Role (not the ClusterRole) grants must be asked in the Role's namespace.
        cluster_granted = {(g, r) for rule in find(docs, "ClusterRole")["rules"]
                           for g in rule["apiGroups"] for r in rule["resources"]}
        role_granted = {(g, r) for role in find_all(docs, "Role") for rule in role["rules"]
                        for g in rule["apiGroups"] for r in rule["resources"]} - cluster_granted
        for _, path, _ in requests:
            parsed = APIServerDouble.parse_path(path)
            if parsed and (parsed[1], parsed[3]) in role_granted:
                assert parsed[4] == NAMESPACE, f"{path}: outside the namespace of the Role"
        events = [o for p, o in double.objects.items() if "/events/" in p]

    assert status["source"]["kind"] == "cluster"
    assert sorted(r["rule"] for r in status["rules"]) == sorted(
        f"{cm['metadata']['namespace']}/{cm['metadata']['name']}" for cm in rule_maps)
    assert [r["rule"] for r in status["invalidRules"]] == ["shop/broken"]
    (event,) = events
    assert event["reason"] == "InvalidRule" and event["type"] == "Warning"
    granted = rbac_grants(docs)
    requested = requested_rights(requests)
    assert requested, "the agent made no API request"
    assert not not_granted(requested, granted), f"requests the RBAC does not allow: {not_granted(requested, granted)}"
    assert not any(resource == "secrets" for _, resource, _, _ in requested)
    # ... and the requests did exercise the grants that matter.
    exercised = {(g, r, v) for g, r, v, _ in requested}
    assert {("", "configmaps", "list"), ("", "configmaps", "watch"), ("", "namespaces", "list"),
            ("", "namespaces", "watch"), ("events.k8s.io", "events", "create")} <= exercised
    assert ("", "configmaps", "get", last_good["metadata"]["name"]) in requested
