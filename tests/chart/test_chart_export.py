"""Violation export in the chart (reference §7, §10): `enableAdmissionViolationExport`, `exportBackend`,
`audit.*` and `admission.disableExportSidecar`, rendered with the real helm. The Kubernetes
documents are validated with kubernetes-validate; the Connection, a custom kind it has no schema
for, against the openAPIV3Schema of the chart's own CRD (crds/connection.yaml), strictly."""

from __future__ import annotations

import copy
import re

import jsonschema
import kubernetes_validate
import pytest
import yaml

from conftest import validate_k8s, CHART, FULLNAME, NAMESPACE, REPO, TESTS, find, find_all, render, render_text, run_helm

ON = ["enableAdmissionViolationExport=true"]
SIDECAR = ON + ["admission.disableExportSidecar=false"]
VALUES_ALL = TESTS / "values-all.yaml"
K8S_VERSIONS = ["1.25.0", kubernetes_validate.latest_version() + ".0"]
GROUP = "connection.drift-sentinel.io"
CRD = yaml.safe_load((CHART / "crds" / "connection.yaml").read_text())
EXPORT_FLAGS = ("--enable-admission-violation-export", "--audit-connection", "--audit-channel")


def pod_spec(docs: list[dict]) -> dict:
    return find(docs, "Deployment")["spec"]["template"]["spec"]


def agent(docs: list[dict]) -> dict:
    return next(c for c in pod_spec(docs)["containers"] if c["name"] == "drift-sentinel")


def strict(schema):
    """The CRD schema as the API server applies it with strict field validation: an object with
    `properties` and no `additionalProperties` accepts no other field."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def connection_validator() -> jsonschema.Draft7Validator:
    (version,) = [v for v in CRD["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    # Every object also has the fields the API server adds to the structural schema.
    schema["properties"].update({
        "apiVersion": {"const": f"{GROUP}/v1alpha1"},
        "kind": {"const": CRD["spec"]["names"]["kind"]},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
    })
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return jsonschema.Draft7Validator(schema)


def validate_documents(docs: list[dict]) -> None:
    """Every document against the Kubernetes schemas (strict); the Connection against its CRD."""
    for doc in docs:
        if doc["apiVersion"].startswith(f"{GROUP}/"):
            assert CRD["spec"]["scope"] == "Namespaced" and doc["metadata"]["namespace"]
            connection_validator().validate(doc)
            continue
        for version in K8S_VERSIONS:
            validate_k8s(doc, version)


def grants(role: dict) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


# --- defaults: nothing of export -------------------------------------------------------------------


def test_defaults_render_no_export(helm):
    docs = render()
    assert not [d for d in docs if d["kind"] == "Connection"]
    # The only Roles are the last-good ConfigMap's (the webhook's, the audit's) and the record
    # key ConfigMap's; none for Connections.
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] in ("Role", "RoleBinding")) == [
        f"{FULLNAME}-audit-last-good", f"{FULLNAME}-audit-last-good",
        f"{FULLNAME}-last-good", f"{FULLNAME}-last-good",
        f"{FULLNAME}-record-key", f"{FULLNAME}-record-key"]
    pod = pod_spec(docs)
    (c,) = pod["containers"]
    assert not [a for a in c["args"] if a.startswith(EXPORT_FLAGS)]
    assert [v["name"] for v in pod["volumes"]] == ["tls", "tmp", "record-key"]
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/tls", "/tmp", "/record-key"]
    assert not any(GROUP in rule["apiGroups"] for rule in find(docs, "ClusterRole")["rules"])


def test_pod_identity_and_working_directory_are_always_set(helm):
    for sets in ([], ON):
        c = agent(render(sets=sets))
        assert c["workingDir"] == "/"
        env = {e["name"]: e for e in c["env"]}
        assert env["DRIFT_SENTINEL_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["DRIFT_SENTINEL_POD_NAMESPACE"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "metadata.namespace"}}


def test_a_backend_other_than_disk_is_ignored_while_export_is_off(helm):
    docs = render(sets=["exportBackend=kafka"])
    assert not find_all(docs, "Connection")


# --- export on -------------------------------------------------------------------------------------


def test_enabling_export_renders_flags_connection_volume_and_rbac(helm):
    docs = render(sets=ON)
    pod = pod_spec(docs)
    (c,) = pod["containers"]  # no reader unless asked for
    flags = [a for a in c["args"] if a.startswith(EXPORT_FLAGS)]
    assert flags == ["--enable-admission-violation-export", "--audit-connection=audit-connection",
                     "--audit-channel=audit-channel"]
    # Export flags before extraArgs, after the chart's own.
    assert c["args"].index(flags[0]) > c["args"].index("--tls-key-file=/tls/tls.key")

    conn = find(docs, "Connection", "audit-connection")
    assert conn["apiVersion"] == "connection.drift-sentinel.io/v1alpha1"
    assert conn["metadata"]["namespace"] == NAMESPACE
    assert conn["spec"] == {"driver": "disk", "config": {"path": "tmp/violations/topics", "maxAuditResults": 3}}
    assert isinstance(conn["spec"]["config"]["maxAuditResults"], int)
    assert conn["metadata"]["labels"]["app.kubernetes.io/instance"] == "ds"

    assert {"name": "tmp-violations", "emptyDir": {}} in pod["volumes"]
    assert {"name": "tmp-violations", "mountPath": "/tmp/violations"} in c["volumeMounts"]
    # The agent writes below the mount: its working directory makes the relative path absolute.
    assert c["workingDir"] == "/"
    assert ("/" + conn["spec"]["config"]["path"]).startswith("/tmp/violations/")
    assert c["securityContext"]["readOnlyRootFilesystem"] is True

    role = find(docs, "Role", f"{FULLNAME}-export")
    assert role["metadata"]["namespace"] == NAMESPACE == conn["metadata"]["namespace"]
    assert grants(role) == {
        (GROUP, "connections", "get"), (GROUP, "connections", "list"), (GROUP, "connections", "watch"),
        (GROUP, "connections/status", "get"), (GROUP, "connections/status", "patch"),
        (GROUP, "connections/status", "update"),
    }
    assert all("resourceNames" not in rule for rule in role["rules"])
    binding = find(docs, "RoleBinding", f"{FULLNAME}-export")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    # Nothing of Connections cluster-wide: the ClusterRole is the one of the defaults.
    assert find(docs, "ClusterRole")["rules"] == find(render(), "ClusterRole")["rules"]
    validate_documents(docs)


def test_export_values_are_rendered_as_set(helm):
    docs = render(sets=ON + [
        "audit.connection=violations", "audit.channel=admission",
        "audit.exportConnection.path=/var/spool/drift/topics", "audit.exportConnection.maxAuditResults=7",
        "audit.exportVolume.name=spool", "audit.exportVolume.emptyDir.sizeLimit=1Gi",
        "audit.exportVolumeMount.path=/var/spool/drift/", "admission.disableExportSidecar=false",
        "serviceAccount.name=agent",
    ])
    conn = find(docs, "Connection", "violations")
    assert conn["spec"]["config"] == {"path": "/var/spool/drift/topics", "maxAuditResults": 7}
    pod = pod_spec(docs)
    c = agent(docs)
    assert "--audit-connection=violations" in c["args"] and "--audit-channel=admission" in c["args"]
    assert {"name": "spool", "emptyDir": {"sizeLimit": "1Gi"}} in pod["volumes"]
    assert {"name": "spool", "mountPath": "/var/spool/drift"} in c["volumeMounts"]
    reader = next(x for x in pod["containers"] if x["name"] == "admission-reader")
    assert reader["args"] == ["reader", "--path", "/var/spool/drift/topics/admission"]
    assert reader["volumeMounts"] == [{"name": "spool", "mountPath": "/var/spool/drift"}]
    (binding,) = [b for b in find_all(docs, "RoleBinding") if b["metadata"]["name"].endswith("-export")]
    assert binding["subjects"][0]["name"] == "agent"
    validate_documents(docs)


def test_another_volume_source_replaces_the_default_emptydir(helm, tmp_path):
    values = tmp_path / "pvc.yaml"
    values.write_text(yaml.safe_dump({
        "enableAdmissionViolationExport": True,
        "audit": {"exportVolume": {"name": "tmp-violations", "emptyDir": None,
                                   "ephemeral": {"volumeClaimTemplate": {"spec": {
                                       "accessModes": ["ReadWriteOnce"],
                                       "resources": {"requests": {"storage": "1Gi"}}}}}},
                  "exportVolumeMount": {"path": "/var/spool/drift-sentinel"},
                  "exportConnection": {"path": "var/spool/drift-sentinel/topics"}},
    }))
    docs = render(values=[values])
    (volume,) = [v for v in pod_spec(docs)["volumes"] if v["name"] == "tmp-violations"]
    assert set(volume) == {"name", "ephemeral"}
    validate_documents(docs)
    # Without `emptyDir: null` the merged volume would have two sources: refused with a hint.
    out = render_text(sets=ON + ["audit.exportVolume.persistentVolumeClaim.claimName=spool"], check=False)
    assert out.returncode != 0
    assert 'audit.exportVolume must have exactly one volume source besides its name ' \
           '(got ["emptyDir","persistentVolumeClaim"])' in out.stderr
    assert "audit.exportVolume.emptyDir to null" in out.stderr


def test_the_documented_custom_volume_example_renders(helm, tmp_path):
    text = (REPO / "docs" / "install.md").read_text()
    section = text.split("\n## Violation export\n", 1)[1].split("\n## ", 1)[0]
    examples = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.S)]
    assert examples
    for i, example in enumerate(examples):
        values = tmp_path / f"example-{i}.yaml"
        values.write_text(yaml.safe_dump(example))
        validate_documents(render(values=[values]))


# --- the demonstration reader --------------------------------------------------------------------


def test_reader_sidecar_only_when_asked_for(helm):
    assert [c["name"] for c in pod_spec(render(sets=ON))["containers"]] == ["drift-sentinel"]
    assert [c["name"] for c in pod_spec(render(sets=["admission.disableExportSidecar=false"]))["containers"]] \
        == ["drift-sentinel"]  # export off: no reader either
    docs = render(sets=SIDECAR)
    pod = pod_spec(docs)
    assert [c["name"] for c in pod["containers"]] == ["drift-sentinel", "admission-reader"]
    main, reader = pod["containers"]
    assert reader["image"] == main["image"] and reader["imagePullPolicy"] == main["imagePullPolicy"]
    assert reader["args"] == ["reader", "--path", "/tmp/violations/topics/audit-channel"]
    assert reader["volumeMounts"] == [{"name": "tmp-violations", "mountPath": "/tmp/violations"}]
    assert reader["securityContext"] == main["securityContext"]
    assert reader["securityContext"]["readOnlyRootFilesystem"] is True
    assert reader["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert reader["resources"]["requests"] and reader["resources"]["limits"]["memory"]
    assert "ports" not in reader and "env" not in reader
    validate_documents(docs)


def test_reader_path_follows_a_relative_path_and_the_channel(helm):
    docs = render(sets=SIDECAR + ["audit.exportConnection.path=tmp/violations/./x/../out",
                                  "audit.channel=team-a"])
    reader = pod_spec(docs)["containers"][1]
    assert reader["args"][-1] == "/tmp/violations/out/team-a"


# --- values that cannot work fail rendering ------------------------------------------------------


@pytest.mark.parametrize("backend", ["kafka", "dapr", "Disk", ""])
def test_export_backend_other_than_disk_fails(helm, backend):
    out = render_text(sets=ON + [f"exportBackend={backend}"], check=False)
    assert out.returncode != 0
    assert (f'exportBackend must be "disk" when enableAdmissionViolationExport is true (got "{backend}"): '
            "admission violation export supports only the disk driver") in out.stderr, out.stderr


@pytest.mark.parametrize("path,mount,resolved", [
    ("var/out", None, "/var/out"),
    ("/var/out", None, None),
    ("tmp/violations", None, "/tmp/violations"),               # the volume's root: not below it
    ("tmp/violations/../etc", None, "/tmp/etc"),
    ("tmp/violationsx/topics", None, "/tmp/violationsx/topics"),
    ("tmp/violations/topics", "/var/spool", "/tmp/violations/topics"),
])
def test_export_path_outside_the_mount_fails(helm, path, mount, resolved):
    sets = ON + [f"audit.exportConnection.path={path}"]
    if mount:
        sets.append(f"audit.exportVolumeMount.path={mount}")
    out = render_text(sets=sets, check=False)
    assert out.returncode != 0, f"rendered with {sets}"
    where = f' (resolved against /, the agent\'s working directory: "{resolved}")' if resolved else ""
    assert (f'audit.exportConnection.path "{path}"{where} is not inside audit.exportVolumeMount.path '
            f'"{mount or "/tmp/violations"}": the agent\'s root filesystem is read-only') in out.stderr, out.stderr
    # Only while export is on: the same values render when it is off.
    render(sets=sets[1:])


@pytest.mark.parametrize("sets,message", [
    (["audit.exportVolume.name=tls"], 'audit.exportVolume.name "tls" is taken by a volume of the chart'),
    (["audit.exportVolume.name=tmp"], 'audit.exportVolume.name "tmp" is taken by a volume of the chart'),
    (["audit.exportVolumeMount.path=/tmp", "audit.exportConnection.path=/tmp/topics"],
     'audit.exportVolumeMount.path "/tmp" collides with a volume of the chart'),
])
def test_export_volume_colliding_with_the_charts_own_fails(helm, sets, message):
    out = render_text(sets=ON + sets, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


@pytest.mark.parametrize("sets,message", [
    (["audit.unknown=1"], "unknown"),
    (["audit.exportConnection.unknown=1"], "unknown"),
    (["audit.exportVolumeMount.readOnly=true"], "readOnly"),
    (["admission.unknown=1"], "unknown"),
    (["audit.exportConnection.maxAuditResults=0"], "maxAuditResults"),
    (["audit.exportConnection.maxAuditResults=three"], "maxAuditResults"),
    (["enableAdmissionViolationExport=maybe"], "enableAdmissionViolationExport"),
    (["admission.disableExportSidecar=no-thanks"], "disableExportSidecar"),
    (["audit.connection=Not_A_Name"], "connection"),
    (["audit.channel=../up"], "channel"),
    (["audit.channel=a/b"], "channel"),
    (["audit.exportConnection.path="], "path"),
    (["audit.exportVolumeMount.path=relative/dir"], "path"),
    (["audit.exportVolumeMount.path=/"], "path"),
    (["audit.exportVolume.secret.secretName=x"], "secret"),    # read-only sources cannot hold the spool
    (["audit.exportVolume.name=Bad_Name"], "name"),
])
def test_schema_rejects_invalid_export_values(helm, sets, message):
    out = render_text(sets=sets, check=False)
    assert out.returncode != 0, f"rendered with {sets}"
    assert "schema" in out.stderr and message in out.stderr, out.stderr


def test_schema_documents_every_export_value(helm):
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in ("enableAdmissionViolationExport", "enableViolationExport", "exportBackend", "audit",
                "admission"):
        assert key in schema["properties"] and key in defaults and key in schema["required"]
    assert defaults["enableAdmissionViolationExport"] is False and defaults["exportBackend"] == "disk"
    assert defaults["enableViolationExport"] is False
    export_keys = {"connection", "channel", "exportConnection", "exportVolume", "exportVolumeMount",
                   "exportSidecar"}
    assert {k: v for k, v in defaults["audit"].items() if k in export_keys} == {
        "exportSidecar": {},
        "connection": "audit-connection", "channel": "audit-channel",
        "exportConnection": {"path": "tmp/violations/topics", "maxAuditResults": 3},
        "exportVolume": {"name": "tmp-violations", "emptyDir": {}},
        "exportVolumeMount": {"path": "/tmp/violations"},
    }
    assert defaults["admission"] == {"disableExportSidecar": True}
    assert schema["properties"]["audit"]["properties"]["exportConnection"]["properties"][
        "maxAuditResults"]["minimum"] == 1


# --- the Connection against its CRD --------------------------------------------------------------


def test_connection_validation_can_fail(helm):
    conn = find(render(sets=ON), "Connection")
    connection_validator().validate(conn)
    for broken in ({"driverr": "disk"}, {"driver": "disk", "config": {"maxAuditResults": 0}},
                   {"driver": "disk", "config": {"maxAuditResults": "3"}},
                   {"driver": "disk", "config": {"paht": "x"}}):
        bad = copy.deepcopy(conn)
        bad["spec"] = broken
        with pytest.raises(jsonschema.ValidationError):
            connection_validator().validate(bad)


def test_connection_crd_is_a_valid_custom_resource_definition():
    for version in K8S_VERSIONS:
        validate_k8s(CRD, version)
    assert CRD["spec"]["group"] == GROUP and CRD["spec"]["names"]["plural"] == "connections"
    (version,) = CRD["spec"]["versions"]
    assert version["subresources"] == {"status": {}}


def test_crd_is_installed_with_the_chart(helm):
    out = render_text("--include-crds", sets=ON)
    kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout) if d]
    # Helm puts crds/ before the templates, so the Connection's kind exists when it is created.
    assert kinds.index("CustomResourceDefinition") < kinds.index("Connection")


# --- all values ----------------------------------------------------------------------------------


def test_all_values_render_the_export_as_set(helm):
    values = yaml.safe_load(VALUES_ALL.read_text())
    assert values["enableAdmissionViolationExport"] is True
    # webhook.matchConditions (in values-all) needs Kubernetes 1.28; the documents are validated
    # for 1.25 too.
    docs = render(values=[VALUES_ALL], sets=["webhook.matchConditions=null"])
    audit = values["audit"]
    conn = find(docs, "Connection", audit["connection"])
    assert conn["spec"] == {"driver": "disk", "config": audit["exportConnection"]}
    c = agent(docs)
    assert f"--audit-connection={audit['connection']}" in c["args"]
    assert f"--audit-channel={audit['channel']}" in c["args"]
    assert {"name": audit["exportVolume"]["name"], "mountPath": audit["exportVolumeMount"]["path"]} \
        in c["volumeMounts"]
    assert audit["exportVolume"] in pod_spec(docs)["volumes"]
    # fullnameOverride and serviceAccount.name of values-all reach the Role and its binding.
    assert find(docs, "RoleBinding", "drift-guard-export")["subjects"][0]["name"] == "drift-guard-agent"
    validate_documents(docs)


@pytest.mark.parametrize("sets", [ON, SIDECAR], ids=["export", "export-and-reader"])
def test_helm_lint_with_export(helm, sets):
    args = ["lint", str(CHART), "--strict", "--namespace", NAMESPACE]
    for s in sets:
        args += ["--set", s]
    out = run_helm(*args, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[ERROR]" not in out.stdout and "[WARNING]" not in out.stdout, out.stdout
