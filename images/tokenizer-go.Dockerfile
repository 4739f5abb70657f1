# gcbench-tok-go: the Go tokenizer of GC-Bench (native/go, standard library only).
#
# Build context: the native/ folder (native/.dockerignore keeps build outputs out).
#
#   docker build -f images/tokenizer-go.Dockerfile -t gcbench/tokenizer-go native/
#   docker run --rm -v "$PWD:/w" gcbench/tokenizer-go --merges /w/m.txt --in /w/c.txt --out /w/c.tok
#
# Stages: `toolchain` (the compiler; the DAG's build_tokenizers task runs it with the
# sources mounted, see gcbench/factory/tokenizers.py), `build` (compiles the copied
# sources), `runtime` (the binary alone, as the entry point).
#
# BASE_IMAGE is a build argument so the same file builds from a locally made Debian
# image where no registry is reachable, e.g.
#   debootstrap --variant=minbase bookworm /tmp/rootfs && tar -C /tmp/rootfs -c . | docker import - gcbench/debian:bookworm
#   docker build --network host --build-arg BASE_IMAGE=gcbench/debian:bookworm \
#       --build-arg RUNTIME_IMAGE=gcbench/debian:bookworm -f images/tokenizer-go.Dockerfile native/
# There the toolchain stage installs Debian's golang-go (Go 1.19, which the code and
# go.mod target).
ARG BASE_IMAGE=golang:1.22-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS toolchain
RUN if ! command -v go >/dev/null 2>&1; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends golang-go \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && go version
# Static binary (no cgo); never download another toolchain; writable caches for any user.
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOCACHE=/tmp/gocache HOME=/tmp
WORKDIR /src

FROM toolchain AS build
COPY go/ /src/
RUN go vet . && go build -trimpath -o /out/gcbench-tok-go . && /out/gcbench-tok-go -h

FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=build /out/gcbench-tok-go /usr/local/bin/gcbench-tok-go
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/gcbench-tok-go"]
