#!/usr/bin/env bash
# Fills in krew/drift.yaml for a release: the version, and for each platform the archive URL and
# the sha256 of the archive built for it.
#
#   scripts/krew-release.sh VERSION DIST_DIR [BASE_URL]
#
# DIST_DIR holds kubectl-drift-{linux,darwin}-{amd64,arm64}.tar.gz. BASE_URL defaults to the
# GitHub release download URL of VERSION. Prints the manifest; redirect it where it belongs.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 VERSION DIST_DIR [BASE_URL]" >&2
  exit 2
fi
version="$1"
dist="$2"
base="${3:-https://github.com/drift-sentinel/drift-sentinel/releases/download/$version}"
manifest="$(dirname "$0")/../krew/drift.yaml"

python3 - "$manifest" "$version" "$dist" "$base" <<'PY'
import hashlib, os, re, sys

manifest, version, dist, base = sys.argv[1:5]
text = open(manifest).read()
text = re.sub(r"(?m)^  version: .*$", f"  version: {version}", text)

def fill(match):
    os_name, arch = match.group("os"), match.group("arch")
    archive = f"kubectl-drift-{os_name}-{arch}.tar.gz"
    path = os.path.join(dist, archive)
    if not os.path.isfile(path):
        sys.exit(f"krew-release: {path} is missing")
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return (f"{match.group('head')}uri: {base}/{archive}\n"
            f"{match.group('indent')}sha256: \"{digest}\"\n")

pattern = re.compile(
    r"(?P<head>(?:.*\n)*?\s+os: (?P<os>\w+)\n\s+arch: (?P<arch>\w+)\n(?P<indent>\s+))uri: .*\n\s+sha256: .*\n")
filled, count = pattern.subn(fill, text)
if count != 4:
    sys.exit(f"krew-release: expected 4 platforms in {manifest}, found {count}")
sys.stdout.write(filled)
PY
