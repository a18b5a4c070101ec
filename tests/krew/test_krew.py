"""The krew manifest is a valid Plugin for linux/darwin × amd64/arm64 whose archives carry the
LICENSE, the release script fills in each platform's archive URL and the sha256 of that archive,
and scripts/release.sh builds the archives (here: linux/amd64, the platform of this machine; see
the README's "Releasing" for the others) with their checksums."""
import hashlib
import os
import pathlib
import re
import subprocess
import tarfile

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / "krew" / "drift.yaml"
PLATFORMS = {("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64")}


def test_manifest_is_a_krew_plugin():
    plugin = yaml.safe_load(MANIFEST.read_text())
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin"
    assert plugin["metadata"]["name"] == "drift"
    spec = plugin["spec"]
    for field in ["version", "homepage", "shortDescription", "description", "caveats"]:
        assert spec[field], field
    assert spec["version"].startswith("v")
    assert "RBAC" in spec["caveats"]
    seen = set()
    for platform in spec["platforms"]:
        labels = platform["selector"]["matchLabels"]
        seen.add((labels["os"], labels["arch"]))
        assert platform["bin"] == "kubectl-drift"
        # The krew index requires the license in what is installed.
        assert {f["from"] for f in platform["files"]} == {"kubectl-drift", "kubectl_complete-drift", "LICENSE"}
        assert platform["uri"].endswith(f"kubectl-drift-{labels['os']}-{labels['arch']}.tar.gz")
        assert len(platform["sha256"]) == 64
    assert seen == PLATFORMS


def test_release_script_fills_urls_and_sums(tmp_path):
    sums = {}
    for os_name, arch in PLATFORMS:
        archive = tmp_path / f"kubectl-drift-{os_name}-{arch}.tar.gz"
        archive.write_bytes(f"{os_name}/{arch}".encode())
        sums[(os_name, arch)] = hashlib.sha256(archive.read_bytes()).hexdigest()
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "krew-release.sh"), "v9.9.9", str(tmp_path), "https://example.test/dl"],
        check=True, capture_output=True, text=True).stdout
    plugin = yaml.safe_load(out)
    assert plugin["spec"]["version"] == "v9.9.9"
    for platform in plugin["spec"]["platforms"]:
        labels = platform["selector"]["matchLabels"]
        key = (labels["os"], labels["arch"])
        assert platform["sha256"] == sums[key]
        assert platform["uri"] == f"https://example.test/dl/kubectl-drift-{key[0]}-{key[1]}.tar.gz"


def test_release_script_refuses_a_missing_archive(tmp_path):
    result = subprocess.run(["bash", str(REPO / "scripts" / "krew-release.sh"), "v1.0.0", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "missing" in result.stderr


# sha256 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_is_the_apache_2_text_the_workspace_declares():
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256
    cargo = (REPO / "Cargo.toml").read_text()
    assert re.search(r'(?m)^license = "Apache-2.0"$', cargo)


def workspace_version() -> str:
    cargo = (REPO / "Cargo.toml").read_text()
    return re.search(r'(?ms)^\[workspace\.package\].*?^version = "([^"]+)"', cargo).group(1)


def release(*args, env=None):
    return subprocess.run(["bash", str(REPO / "scripts" / "release.sh"), *args], capture_output=True, text=True,
                          timeout=3600, env={**os.environ, **(env or {})})


def test_release_refuses_a_version_the_binaries_would_not_report(tmp_path):
    result = release("v9.9.9", str(tmp_path))
    assert result.returncode != 0
    assert f"VERSION v9.9.9 is not v{workspace_version()}" in result.stderr


def test_release_builds_the_linux_amd64_archive_with_its_license_and_checksums(tmp_path):
    version = f"v{workspace_version()}"
    archives = []
    for run in ("first", "second"):
        dist = tmp_path / run
        result = release(version, str(dist), env={"PLATFORMS": "linux/amd64", "IMAGE": "0"})
        assert result.returncode == 0, result.stderr[-4000:]
        assert "krew manifest not filled: it needs the archives of all four platforms (missing: linux/arm64 darwin/amd64 darwin/arm64)" in result.stderr
        archives.append((dist / "kubectl-drift-linux-amd64.tar.gz").read_bytes())
    # The same sources give the same bytes.
    assert archives[0] == archives[1]
    assert sorted(p.name for p in dist.iterdir()) == ["SHA256SUMS", "kubectl-drift-linux-amd64.tar.gz"]
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
    assert check.returncode == 0 and "kubectl-drift-linux-amd64.tar.gz: OK" in check.stdout, check

    with tarfile.open(dist / "kubectl-drift-linux-amd64.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["LICENSE", "kubectl-drift", "kubectl_complete-drift"]
        assert tar.extractfile("LICENSE").read() == (REPO / "LICENSE").read_bytes()
        for binary in ("kubectl-drift", "kubectl_complete-drift"):
            assert members[binary].mode & 0o111 and members[binary].uid == 0
        tar.extractall(tmp_path / "unpacked", filter="data")
    plugin = tmp_path / "unpacked" / "kubectl-drift"
    # Static: no program interpreter, so any Linux distribution runs it.
    headers = subprocess.run(["readelf", "-l", str(plugin)], capture_output=True, text=True, check=True).stdout
    assert "Requesting program interpreter" not in headers
    out = subprocess.run([str(plugin), "--version"], capture_output=True, text=True, check=True).stdout
    assert workspace_version() in out
