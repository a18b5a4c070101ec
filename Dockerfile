# syntax=docker/dockerfile:1
#
# The Drift Sentinel agent image: one static binary (Rust's musl target, release profile) on an
# empty base, run as the non-root user 65532 (the chart runs it with runAsNonRoot, a read-only
# root filesystem and no capabilities). No shell, no C library, no package manager.
#
#   docker build -t ghcr.io/drift-sentinel/drift-sentinel:0.1.0 .
#
# CI builds the same image without Docker or a registry (.ci/build-image: buildah from scratch,
# the same binary, user, entrypoint, command, port and labels) and runs it on a real node.
# The build context is the repository root: the agent embeds the chart's default rule
# (charts/drift-sentinel/files/default-rule.yaml), so charts/ must be in the context.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
# musl-gcc compiles the C parts of the crypto crate for the musl target.
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the target directory between builds; the binary is copied
# out of the cached target directory so that it lands in the image layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
    && cargo build --release --locked --target "$target" -p drift-sentinel --bin drift-sentinel \
    && install -D -m 0755 "target/$target/release/drift-sentinel" /out/drift-sentinel

FROM scratch
LABEL org.opencontainers.image.title="drift-sentinel" \
      org.opencontainers.image.description="Validating admission webhook that blocks unintended workload drift" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/drift-sentinel /usr/local/bin/drift-sentinel
USER 65532:65532
EXPOSE 8443
WORKDIR /
ENTRYPOINT ["/usr/local/bin/drift-sentinel"]
CMD ["serve"]
