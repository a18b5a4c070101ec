"""The krew manifest is a valid Plugin for linux/darwin × amd64/arm64, and the release script
fills in each platform's archive URL and the sha256 of that archive."""
import hashlib
import pathlib
import subprocess

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
