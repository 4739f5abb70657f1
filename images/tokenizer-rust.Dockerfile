# gcbench-tok-rust: the Rust tokenizer of GC-Bench (native/rust, std only, no crates).
#
# Build context: the native/ folder (native/.dockerignore keeps build outputs out).
#
#   docker build -f images/tokenizer-rust.Dockerfile -t gcbench/tokenizer-rust native/
#   docker run --rm -v "$PWD:/w" gcbench/tokenizer-rust --merges /w/m.txt --in /w/c.txt --out /w/c.tok
#
# Stages: `toolchain` (the compiler; the DAG's build_tokenizers task runs it with the
# sources mounted, see gcbench/factory/tokenizers.py), `build` (compiles the copied
# sources), `runtime` (the binary alone, as the entry point).
#
# BASE_IMAGE is a build argument so the same file builds from a locally made Debian
# image where no registry is reachable, e.g.
#   debootstrap --variant=minbase bookworm /tmp/rootfs && tar -C /tmp/rootfs -c . | docker import - gcbench/debian:bookworm
#   docker build --network host --build-arg BASE_IMAGE=gcbench/debian:bookworm \
#       --build-arg RUNTIME_IMAGE=gcbench/debian:bookworm -f images/tokenizer-rust.Dockerfile native/
# There the toolchain stage installs Debian's cargo/rustc (1.63; the crate needs
# nothing newer and has no dependencies, so the build is offline).
ARG BASE_IMAGE=rust:1.79-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS toolchain
RUN if ! command -v cargo >/dev/null 2>&1; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cargo rustc gcc libc6-dev \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && cargo --version
ENV CARGO_HOME=/tmp/cargo CARGO_NET_OFFLINE=true HOME=/tmp
WORKDIR /src

FROM toolchain AS build
COPY rust/Cargo.toml rust/Cargo.lock /src/
COPY rust/src /src/src
RUN cargo build --release --locked --offline \
    && install -D -m 0755 target/release/gcbench-tok-rust /out/gcbench-tok-rust \
    && /out/gcbench-tok-rust --help

FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=build /out/gcbench-tok-rust /usr/local/bin/gcbench-tok-rust
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/gcbench-tok-rust"]
