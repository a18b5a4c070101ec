"""The webhook's TLS material: generated at render time (a CA and a serving certificate for the
Service's DNS names, the same CA in caBundle), and reused through `lookup` when the Secret
exists, checked with cryptography's X.509 parser and the real helm against an API server double."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from apiserver_double import APIServerDouble
from conftest import FULLNAME, NAMESPACE, find, render, render_text, tls_material, tls_secret


def load(pem: str) -> x509.Certificate:
    certs = x509.load_pem_x509_certificates(pem.encode())
    assert len(certs) == 1, "expected exactly one certificate"
    return certs[0]


def sans(cert: x509.Certificate) -> list[str]:
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)


def check_material(tls: dict, service: str, namespace: str, domain: str = "cluster.local",
                   days: int = 3650) -> tuple[x509.Certificate, x509.Certificate]:
    ca = load(tls["ca.crt"])
    serving = load(tls["tls.crt"])
    # The caBundle is the CA of the Secret, and that CA signed the serving certificate.
    assert load(tls["caBundle"]) == ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert serving.issuer == ca.subject
    serving.verify_directly_issued_by(ca)  # raises InvalidSignature if the CA did not sign it
    assert serving != ca
    # The SANs are the Service's DNS names.
    assert sorted(sans(serving)) == sorted([
        service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{domain}",
    ])
    usages = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    # The key in the Secret is the serving certificate's key.
    key = serialization.load_pem_private_key(tls["tls.key"].encode(), password=None)
    assert key.public_key().public_numbers() == serving.public_key().public_numbers()
    # Valid now, for the configured number of days.
    now = datetime.datetime.now(datetime.timezone.utc)
    for cert in (ca, serving):
        assert cert.not_valid_before_utc <= now + datetime.timedelta(minutes=5)
        lifetime = cert.not_valid_after_utc - now
        assert datetime.timedelta(days=days - 1) < lifetime <= datetime.timedelta(days=days, hours=1)
    return ca, serving


def test_generated_ca_signs_a_serving_certificate_for_the_service(helm):
    docs = render()
    secret = tls_secret(docs)
    assert secret["metadata"]["name"] == f"{FULLNAME}-cert"
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    check_material(tls_material(docs), FULLNAME, NAMESPACE)


def test_certificate_follows_names_namespace_domain_and_validity(helm):
    docs = render(release="guard", namespace="security", sets=[
        "fullnameOverride=webhook-x", "clusterDomain=corp.internal", "certificate.validityDays=30"])
    check_material(tls_material(docs), "webhook-x", "security", "corp.internal", days=30)
    hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["service"]["name"] == "webhook-x"
    assert hook["clientConfig"]["service"]["namespace"] == "security"


def test_each_render_without_a_secret_generates_a_new_ca(helm):
    first, second = tls_material(render()), tls_material(render())
    assert load(first["ca.crt"]) != load(second["ca.crt"])
    # ... and every one is consistent on its own (no second generation inside one render).
    check_material(second, FULLNAME, NAMESPACE)


def test_a_different_ca_does_not_verify(helm):
    """The signature check above can fail: another render's CA did not sign this certificate."""
    first, second = tls_material(render()), tls_material(render())
    with pytest.raises(Exception):
        load(first["tls.crt"]).verify_directly_issued_by(load(second["ca.crt"]))


def secret_object(data: dict, release: str = "ds") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": f"{FULLNAME}-cert",
            "namespace": NAMESPACE,
            # As left by an earlier install of the release.
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": NAMESPACE},
        },
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def render_against(double: APIServerDouble, tmp_path) -> list[dict]:
    """`helm template --dry-run=server`: the chart's `lookup` asks the API server double."""
    return render("--dry-run=server", "--disable-openapi-validation",
                  env={"KUBECONFIG": double.kubeconfig(str(tmp_path))})


def test_existing_secret_is_reused_with_its_ca_in_the_ca_bundle(helm, kubectl, tmp_path):
    existing = tls_material(render())
    with APIServerDouble(kubectl) as double:
        double.add_namespace(NAMESPACE)
        double.put_object(secret_object({k: existing[k] for k in ("ca.crt", "tls.crt", "tls.key")}), "secrets")
        docs = render_against(double, tmp_path)
        assert ("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-cert") in double.requests
    reused = tls_material(docs)
    for key in ("ca.crt", "tls.crt", "tls.key"):
        assert reused[key] == existing[key], key
    assert reused["caBundle"] == existing["ca.crt"]
    check_material(reused, FULLNAME, NAMESPACE)


@pytest.mark.parametrize("missing", ["ca.crt", "tls.crt", "tls.key"])
def test_incomplete_secret_is_replaced_by_new_material(helm, kubectl, tmp_path, missing):
    existing = tls_material(render())
    with APIServerDouble(kubectl) as double:
        double.add_namespace(NAMESPACE)
        double.put_object(secret_object({k: existing[k] for k in ("ca.crt", "tls.crt", "tls.key") if k != missing}),
                          "secrets")
        docs = render_against(double, tmp_path)
    fresh = tls_material(docs)
    assert fresh["ca.crt"] != existing["ca.crt"]
    check_material(fresh, FULLNAME, NAMESPACE)


def test_without_a_cluster_lookup_finds_nothing_and_generates(helm):
    # `helm template` without --dry-run=server never contacts a cluster: it always generates.
    out = render_text()
    assert "BEGIN" not in out.stdout  # PEM only ever appears base64-encoded
    check_material(tls_material(render()), FULLNAME, NAMESPACE)
