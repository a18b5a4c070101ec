"""`webhook.clientAuth` and `tls.minVersion`: who may call the webhook (the agent's
`--client-ca-file`, `--client-names`, `--tls-min-version`), rendered by the real helm, checked
by the values schema and against the Kubernetes schemas."""

from __future__ import annotations

import pytest

from conftest import FULLNAME, find, render, render_text, validate_k8s

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ==\n-----END CERTIFICATE-----\n"


def agent_container(docs: list[dict]) -> dict:
    deployment = find(docs, "Deployment", FULLNAME)
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                if c["name"] == "drift-sentinel")


def volume(docs: list[dict], name: str) -> dict | None:
    deployment = find(docs, "Deployment", FULLNAME)
    return next((v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == name), None)


def test_off_by_default_with_tls_12():
    docs = render()
    args = agent_container(docs)["args"]
    assert "--tls-min-version=1.2" in args
    assert not any(a.startswith("--client-") for a in args)
    assert volume(docs, "client-ca") is None
    assert not [d for d in docs if d["metadata"]["name"] == f"{FULLNAME}-client-ca"]


def test_inline_ca_becomes_a_configmap_mounted_for_the_agent(helm):
    docs = render(
        "--set-string", f"webhook.clientAuth.caBundle={CA_PEM}",
        sets=["webhook.clientAuth.enabled=true",
              "webhook.clientAuth.names={kube-apiserver,apiserver.example}",
              "tls.minVersion=1.3"])
    container = agent_container(docs)
    assert "--client-ca-file=/client-ca/ca.crt" in container["args"]
    assert "--client-names=kube-apiserver,apiserver.example" in container["args"]
    assert "--tls-min-version=1.3" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "client-ca")
    assert mount == {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True}
    assert volume(docs, "client-ca") == {"name": "client-ca", "configMap": {"name": f"{FULLNAME}-client-ca"}}
    config_map = find(docs, "ConfigMap", f"{FULLNAME}-client-ca")
    assert config_map["data"]["ca.crt"] == CA_PEM
    # The probes stay without a client certificate: plain HTTPS GETs.
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    for doc in (config_map, find(docs, "Deployment", FULLNAME)):
        validate_k8s(doc, "1.30.0")


def test_ca_from_a_secret_uses_its_key():
    docs = render(sets=["webhook.clientAuth.enabled=true",
                        "webhook.clientAuth.caSecret.name=apiserver-client-ca",
                        "webhook.clientAuth.caSecret.key=bundle.pem"])
    assert "--client-ca-file=/client-ca/bundle.pem" in agent_container(docs)["args"]
    assert "--client-names=kube-apiserver" in agent_container(docs)["args"]
    assert volume(docs, "client-ca") == {"name": "client-ca", "secret": {"secretName": "apiserver-client-ca"}}
    assert not [d for d in docs if d["metadata"]["name"] == f"{FULLNAME}-client-ca"]


@pytest.mark.parametrize("sets, extra, says", [
    (["webhook.clientAuth.enabled=true"], [],
     "webhook.clientAuth.enabled needs the CA of the API server's client certificate"),
    (["webhook.clientAuth.enabled=true", "webhook.clientAuth.caSecret.name=s"],
     ["--set-string", f"webhook.clientAuth.caBundle={CA_PEM}"],
     "are both set: give the CA one way"),
    (["webhook.clientAuth.names=null"], [], "names"),
    (["webhook.clientAuth.names={kube apiserver}"], [], "/webhook/clientAuth/names/0"),
    (["webhook.clientAuth.caSecret.name=Not_A_Name"], [], "/webhook/clientAuth/caSecret/name"),
    (["webhook.clientAuth.enabled=true"], ["--set-string", "webhook.clientAuth.caBundle=bm90IFBFTQ=="],
     "/webhook/clientAuth/caBundle"),
    (["tls.minVersion=1.1"], [], "/tls/minVersion"),
    (["env[0].name=DRIFT_SENTINEL_CLIENT_CA_FILE", "env[0].value=/x"], [],
     "set webhook.clientAuth (caBundle or caSecret) instead"),
])
def test_bad_values_are_refused_naming_them(sets, extra, says):
    out = render_text(*extra, sets=sets, check=False)
    assert out.returncode != 0, out.stdout[:500]
    assert says in out.stderr, out.stderr
