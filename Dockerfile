# The one `muster` binary (scheduler, node agent, simulator, explain, crds) in a small image.
#
#   docker build -t muster:0.1.0 .
#
# manifests/kustomization.yaml names the image (`images:`); point it at where you push this.

# Build stage: the Rust toolchain, the locked dependency set, a release build.
FROM rust:1.89-bookworm AS builder
WORKDIR /src
# protoc-free build: the kubelet plugin's protobuf files are compiled by build.rs in Rust.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin muster \
    && install -D -m 0755 target/release/muster /out/muster

# Runtime stage: the same Debian release as the builder (so glibc matches), slimmed, with
# CA certificates and nothing else added.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 muster \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin muster
COPY --from=builder /out/muster /usr/local/bin/muster
COPY scheduler-config/default.yaml /etc/muster/default.yaml
# A non-root user. The node agent's DaemonSet overrides it (runAsUser: 0) because it must
# read /dev/nvidia* and write the kubelet's plugin sockets on the host.
USER 65532:65532
EXPOSE 10251 9400
ENTRYPOINT ["/usr/local/bin/muster"]
CMD ["scheduler"]
