"""The chart's side of reference §2 "Rules that cannot open a hole": the rule webhook (CREATE and
UPDATE of rule ConfigMaps at /validate-rule, failurePolicy Ignore, matchConditions on the rule
annotation from Kubernetes 1.28), the last-good ConfigMap with a Role that reaches it by name
only, and the cluster rule namespaces."""

from __future__ import annotations

from conftest import FULLNAME, NAMESPACE, find, find_all, render, render_text


def rule_webhook(docs):
    (hook,) = [w for w in find(docs, "ValidatingWebhookConfiguration")["webhooks"]
               if w["name"] == "rules.drift-sentinel.k8s.io"]
    return hook


def test_the_rule_webhook(helm):
    docs = render("--kube-version", "1.30.0")
    hook = rule_webhook(docs)
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert hook["clientConfig"]["service"]["path"] == "/validate-rule"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                              "resources": ["configmaps"], "scope": "Namespaced"}]
    # No namespace is skipped: the cluster rules live in the release's own namespace.
    assert "namespaceSelector" not in hook
    (condition,) = hook["matchConditions"]
    assert "trim().lowerAscii() == 'true'" in condition["expression"]
    assert "'drift-sentinel.k8s.io/rule'" in condition["expression"]
    # The same CA as the admission webhook.
    main = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["caBundle"] == main["clientConfig"]["caBundle"]

    # Before 1.28 there are no matchConditions: every ConfigMap reaches the agent, which admits
    # what is not a rule untouched.
    assert "matchConditions" not in rule_webhook(render("--kube-version", "1.27.0"))
    # It can be left out.
    hooks = find(render(sets=["webhook.validateRules.enabled=false"]), "ValidatingWebhookConfiguration")["webhooks"]
    assert [h["name"] for h in hooks] == ["validate.drift-sentinel.k8s.io"]


def test_the_rule_webhook_by_url(helm):
    docs = render(sets=["webhook.url=https://10.0.0.7:8443/validate"])
    assert rule_webhook(docs)["clientConfig"]["url"] == "https://10.0.0.7:8443/validate-rule"
    docs = render(sets=["webhook.url=https://10.0.0.7:8443/hook",
                        "webhook.validateRules.url=https://10.0.0.7:8443/rules"])
    assert rule_webhook(docs)["clientConfig"]["url"] == "https://10.0.0.7:8443/rules"
    failed = render_text(sets=["webhook.url=https://10.0.0.7:8443/hook"], check=False)
    assert failed.returncode != 0 and "webhook.validateRules.url" in failed.stderr


def test_last_good_configmap_and_its_role(helm):
    docs = render()
    name = f"{FULLNAME}-last-good-rules"
    last_good = find(docs, "ConfigMap", name)
    assert last_good["metadata"]["namespace"] == NAMESPACE
    assert "data" not in last_good, "the agent fills it; an upgrade must leave what it wrote"
    role = find(docs, "Role", f"{FULLNAME}-last-good")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": [name], "verbs": ["get", "patch"]}]
    binding = find(docs, "RoleBinding", role["metadata"]["name"])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    (container,) = [c for c in find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "drift-sentinel"]
    assert f"--last-good-configmap={name}" in container["args"]


def test_cluster_rule_namespaces(helm):
    args = lambda docs: next(c for c in find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
                             if c["name"] == "drift-sentinel")["args"]
    assert not [a for a in args(render()) if a.startswith("--cluster-rule-namespaces")]
    docs = render(sets=["clusterRuleNamespaces={platform,team-*}"])
    assert "--cluster-rule-namespaces=platform,team-*" in args(docs)
    failed = render_text(sets=["env[0].name=DRIFT_SENTINEL_CLUSTER_RULE_NAMESPACES", "env[0].value=*"], check=False)
    assert failed.returncode != 0 and "clusterRuleNamespaces" in failed.stderr


def test_events_are_on_by_default_and_a_value_turns_them_off(helm):
    """Reference §6 "Events": `events.enabled` is `--events`; the RBAC grants Events create and
    patch only (invalid rules are reported with Events whatever the value)."""
    args = lambda docs: next(c for c in find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
                             if c["name"] == "drift-sentinel")["args"]
    assert "--events=true" in args(render())
    docs = render(sets=["events.enabled=false"])
    assert "--events=false" in args(docs)
    event_rules = [r for r in find(docs, "ClusterRole")["rules"] if "events.k8s.io" in r.get("apiGroups", [])]
    assert event_rules == [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]
    failed = render_text(sets=["env[0].name=DRIFT_SENTINEL_EVENTS", "env[0].value=off"], check=False)
    assert failed.returncode != 0 and "events.enabled" in failed.stderr
