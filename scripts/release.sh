#!/usr/bin/env bash
# A release of Drift Sentinel in one command: the kubectl plugin's krew archives for the four
# platforms of krew/drift.yaml, the agent image, their sha256 sums, and the krew manifest filled
# for those archives.
#
#   scripts/release.sh VERSION [DIST_DIR] [BASE_URL]
#
# VERSION is v<the workspace's version> (e.g. v0.1.0): the binaries report that version and the
# image is tagged with the chart's appVersion, so a mismatch is refused. DIST_DIR (default
# target/dist/VERSION, emptied first) receives:
#   kubectl-drift-{linux,darwin}-{amd64,arm64}.tar.gz  kubectl-drift, kubectl_complete-drift and
#                                                      LICENSE, at the archive's root
#   drift-sentinel-VERSION-linux-amd64.oci.tar         the agent image as an OCI archive, built by
#                                                      .ci/build-image (the image CI tests)
#   drift.yaml                                         krew/drift.yaml filled in by
#                                                      scripts/krew-release.sh (BASE_URL: where the
#                                                      archives will be downloaded from)
#   SHA256SUMS                                         `sha256sum -c` checks every file above
#
# The Linux binaries are static (musl), so they run on any distribution. The platform of the
# machine itself is built with cargo (musl-gcc from Debian's musl-tools, which .ci/install-tools
# installs); every other one with cargo-zigbuild (zig as its C compiler and linker), both
# installed on first use into target/release-tools: zig from PyPI (`ziglang`), cargo-zigbuild
# from crates.io. The Rust targets are added with rustup. The darwin binaries link Apple's
# Security and CoreFoundation frameworks (kube's TLS verifies with the macOS trust store), whose
# stubs come only with Apple's SDK: off macOS, give SDKROOT=/path/to/MacOSX.sdk, or build the
# darwin archives on a Mac (PLATFORMS="darwin/amd64 darwin/arm64").
#
# Environment:
#   PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"  the archives to build; the
#             manifest is filled only when all four are built
#   IMAGE=0   no image (e.g. where buildah is not installed)
#   APPEND=1  keep what DIST_DIR holds (archives built on another machine, e.g. the darwin ones on
#             a Mac): the manifest is filled once DIST_DIR has all four archives
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
ZIGLANG_VERSION=0.15.2
CARGO_ZIGBUILD_VERSION=0.24.1
ALL_PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"

die() { echo "release: $*" >&2; exit 1; }

[[ $# -ge 1 && $# -le 3 ]] || { echo "usage: $0 VERSION [DIST_DIR] [BASE_URL]" >&2; exit 2; }
version="$1"
workspace_version="$(awk -F'"' '/^\[workspace.package\]/ {p = 1} p && /^version = / {print $2; exit}' Cargo.toml)"
[[ "$version" == "v$workspace_version" ]] ||
  die "VERSION $version is not v$workspace_version, the version of Cargo.toml's [workspace.package] (the binaries report it): change that first"
app_version="$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' charts/drift-sentinel/Chart.yaml)"
[[ "$app_version" == "$workspace_version" ]] ||
  die "the chart's appVersion $app_version is not $workspace_version: the chart would install another image"
dist="${2:-target/dist/$version}"
base="${3:-}"
platforms="${PLATFORMS:-$ALL_PLATFORMS}"
[[ -f LICENSE ]] || die "LICENSE is missing: the krew index requires it in every archive"

triple() {
  case "$1" in
    linux/amd64) echo x86_64-unknown-linux-musl ;;
    linux/arm64) echo aarch64-unknown-linux-musl ;;
    darwin/amd64) echo x86_64-apple-darwin ;;
    darwin/arm64) echo aarch64-apple-darwin ;;
    *) die "unknown platform $1 (one of: $ALL_PLATFORMS)" ;;
  esac
}
for platform in $platforms; do triple "$platform" >/dev/null; done

# The platform this machine builds natively, if it is one of ours.
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) host=linux/amd64 ;;
  Linux/aarch64) host=linux/arm64 ;;
  Darwin/x86_64) host=darwin/amd64 ;;
  Darwin/arm64) host=darwin/arm64 ;;
  *) host="" ;;
esac
for platform in $platforms; do
  if [[ "$platform" == darwin/* && "$(uname -s)" != Darwin && -z "${SDKROOT:-}" ]]; then
    die "$platform cannot be linked here: kubectl-drift links Apple's Security and CoreFoundation frameworks (kube-client's rustls-tls verifies through rustls-platform-verifier and security-framework), and zig has no stubs of them; they come only with Apple's SDK. Set SDKROOT to a MacOSX.sdk, or build the darwin archives on macOS (PLATFORMS=\"darwin/amd64 darwin/arm64\")"
  fi
done
if [[ " $platforms " == *" $host "* && "$host" == linux/* ]]; then
  command -v musl-gcc >/dev/null || die "musl-gcc is missing (Debian's musl-tools; bash .ci/install-tools)"
fi

# --- the tools of the other platforms: zig and cargo-zigbuild, in target/release-tools ----------
tools="$REPO/target/release-tools"
need_zig=0
for platform in $platforms; do [[ "$platform" == "$host" ]] || need_zig=1; done
if (( need_zig )); then
  if [[ ! -x "$tools/venv/bin/python" ]] ||
     [[ "$("$tools/venv/bin/python" -m ziglang version 2>/dev/null)" != "$ZIGLANG_VERSION" ]]; then
    echo "release: installing zig $ZIGLANG_VERSION (PyPI ziglang) into ${tools#"$REPO"/}" >&2
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "ziglang==$ZIGLANG_VERSION"
  fi
  if [[ "$("$tools/bin/cargo-zigbuild" --version 2>/dev/null)" != "cargo-zigbuild $CARGO_ZIGBUILD_VERSION" ]]; then
    echo "release: installing cargo-zigbuild $CARGO_ZIGBUILD_VERSION into ${tools#"$REPO"/}" >&2
    cargo install --quiet --locked --root "$tools" cargo-zigbuild --version "=$CARGO_ZIGBUILD_VERSION"
  fi
  # cargo-zigbuild runs `python3 -m ziglang` when no zig is on PATH: the venv's python.
  export PATH="$tools/bin:$tools/venv/bin:$PATH"
fi

[[ "${APPEND:-0}" == 1 ]] || rm -rf "$dist"
mkdir -p "$dist"
dist="$(cd "$dist" && pwd)"

# Archives whose bytes depend only on their files: sorted, owned by root, dated by the last
# commit.
epoch="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
archive() {
  local out="$1" dir="$2"
  shift 2
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" --format=gnu \
    -C "$dir" -cf - "$@" | gzip -9n > "$out"
}

# --- the plugin, one archive per platform -------------------------------------------------------
for platform in $platforms; do
  target="$(triple "$platform")"
  rustup target list --installed | grep -qx "$target" || rustup target add "$target"
  if [[ "$platform" == "$host" ]]; then
    echo "release: kubectl-drift for $platform ($target, cargo)" >&2
    build=(cargo build)
  else
    echo "release: kubectl-drift for $platform ($target, cargo-zigbuild)" >&2
    build=(cargo zigbuild)
  fi
  "${build[@]}" --release --locked --target "$target" -p kubectl-drift \
    --bin kubectl-drift --bin kubectl_complete-drift
  # Static, so that any distribution runs it: refuse a Linux binary that needs a loader.
  if [[ "$platform" == linux/* ]] && readelf -l "target/$target/release/kubectl-drift" | grep -q 'Requesting program interpreter'; then
    die "target/$target/release/kubectl-drift is not static"
  fi
  stage="$(mktemp -d)"
  cp "target/$target/release/kubectl-drift" "target/$target/release/kubectl_complete-drift" "$stage/"
  cp LICENSE "$stage/"
  chmod 0755 "$stage/kubectl-drift" "$stage/kubectl_complete-drift"
  chmod 0644 "$stage/LICENSE"
  name="kubectl-drift-${platform%/*}-${platform#*/}.tar.gz"
  archive "$dist/$name" "$stage" LICENSE kubectl-drift kubectl_complete-drift
  rm -rf "$stage"
  echo "release: $name: $(du -b "$dist/$name" | cut -f1) bytes" >&2
done

# --- the agent image -------------------------------------------------------------------------------
if [[ "${IMAGE:-1}" != 0 ]]; then
  [[ -x .ci/build-image ]] || die ".ci/build-image is missing: it builds the agent image CI tests"
  echo "release: the agent image (.ci/build-image)" >&2
  bash .ci/build-image
  cp target/images/drift-sentinel.tar "$dist/drift-sentinel-$version-linux-amd64.oci.tar"
fi

# --- the krew manifest, once DIST_DIR has every platform's archive ------------------------------
missing=""
for platform in $ALL_PLATFORMS; do
  [[ -f "$dist/kubectl-drift-${platform%/*}-${platform#*/}.tar.gz" ]] || missing+=" $platform"
done
if [[ -z "$missing" ]]; then
  bash scripts/krew-release.sh "$version" "$dist" ${base:+"$base"} > "$dist/drift.yaml"
else
  rm -f "$dist/drift.yaml"
  echo "release: krew manifest not filled: it needs the archives of all four platforms (missing:$missing)" >&2
fi

(cd "$dist" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort | xargs sha256sum > SHA256SUMS)
echo "release: ${dist#"$REPO"/}:" >&2
(cd "$dist" && cat SHA256SUMS) >&2
