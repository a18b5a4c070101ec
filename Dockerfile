# syntax=docker/dockerfile:1
#
# The Drift Sentinel agent image: built with the Rust toolchain image, run on distroless as the
# non-root user 65532 (the chart runs it with runAsNonRoot, a read-only root filesystem and no
# capabilities).
#
#   docker build -t ghcr.io/drift-sentinel/drift-sentinel:0.1.0 .
#
# The build context is the repository root: the agent embeds the chart's default rule
# (charts/drift-sentinel/files/default-rule.yaml), so charts/ must be in the context.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the target directory between builds; the binary is copied
# out of the cached target directory so that it lands in the image layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p drift-sentinel --bin drift-sentinel \
    && install -D -m 0755 target/release/drift-sentinel /out/drift-sentinel

# glibc, libgcc and CA certificates, no shell, no package manager; user 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="drift-sentinel" \
      org.opencontainers.image.description="Validating admission webhook that blocks unintended workload drift" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/drift-sentinel /usr/local/bin/drift-sentinel
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/drift-sentinel"]
CMD ["serve"]
