#!/usr/bin/env bash
# make test-compose: docker-compose.yml started for real and driven as an operator would.
#
#   1. the engine, base image, trial and tokenizer images of make test-docker
#      (scripts/docker_lib.sh; the same GCBENCH_DOCKER_ROOT, so its layers are reused);
#   2. an env file for the test deployment under $GCBENCH_DOCKER_ROOT/compose: random
#      secrets, free ports on 127.0.0.1, a copy of the checkout's dags/, native/,
#      deploy/ and examples/tokenizer-c/ (readable by the Airflow uid wherever the
#      checkout lies; GCBENCH_BASE_IMAGE for toolchain images the build task makes) whose plans/
#      holds plans/smoke.yaml and the test plans of tests/compose/plans/, and
#      COMPOSE_FILE=docker-compose.yml:deploy/compose.debian.yml: every image built
#      without Docker Hub, as docs/deployment.md tells users;
#   3. `docker compose build` of the Airflow, PostgreSQL and Redis images;
#   4. pytest tests/compose (GCBENCH_REQUIRE_DOCKER=1: nothing passes by skipping);
#   5. on exit: `docker compose down -v` of every test project, then what test-docker's
#      exit does (leftover trial containers removed, the daemon it started stopped).
# It prints how long the build and the tests took (the CI budget: at most 20 minutes
# cold, 8 warm).
#
# Environment: as scripts/test_docker.sh; PYTEST_ARGS (extra pytest arguments),
# GCBENCH_COMPOSE_KEEP=1 (leave the test deployment up), GCBENCH_PREPARE_ONLY=1 (build the
# images, run no test).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT_DIR="$(pwd)"
GCB_NAME=compose
# shellcheck source=scripts/docker_lib.sh
. scripts/docker_lib.sh

gcb_packages
gcb_engine
gcb_base_image
gcb_trial_images
gcb_compose_v2
gcb_local_inputs

# ---------------------------------------------------------------- the test deployment
case "$DOCKER_HOST" in
    unix://*) socket="${DOCKER_HOST#unix://}" ;;
    *) echo "test-compose mounts the engine's socket into Airflow: DOCKER_HOST must be unix://..." >&2; exit 1 ;;
esac
work="$STATE/compose"
project="gcbench-ci"
env_file="$work/test.env"
compose() { $GCBENCH_COMPOSE --project-directory "$ROOT_DIR" --env-file "$env_file" -p "$project" "$@"; }
down_all() {  # down_all [force]: at exit unless GCBENCH_COMPOSE_KEEP=1; forced before a run
    if [ "${1:-}" != force ] && [ "${GCBENCH_COMPOSE_KEEP:-0}" = 1 ]; then
        echo "GCBENCH_COMPOSE_KEEP=1: $project left up (env file $env_file)"
        return 0
    fi
    [ -f "$env_file" ] || return 0
    gcb_step "docker compose down -v (test projects)"
    local p
    for p in "$project-gpu-a" "$project-gpu-b" "$project"; do
        $GCBENCH_COMPOSE --project-directory "$ROOT_DIR" --env-file "$env_file" -p "$p" \
            --profile celery --profile gpu-worker down -v --remove-orphans --timeout 20 >/dev/null 2>&1 || true
    done
}
down_all force  # leftovers of an earlier or interrupted run (its volumes hold other secrets)
gcb_on_exit down_all

# a fresh data folder, but the native tokenizers built by an earlier run are kept: they are
# cached by the hash of their sources (gcbench/factory/tokenizers.py), never stale
rm -rf "$work/project" "$work/tools"
[ -d "$work/storage/home/tools" ] && mv "$work/storage/home/tools" "$work/tools"
rm -rf "$work/storage"
mkdir -p "$work/project/plans" "$work/storage/home"
[ -d "$work/tools" ] && mv "$work/tools" "$work/storage/home/tools"
# examples/tokenizer-c: the source folder of the preprocessor a test plan declares
# (tests/compose/test_compose_variant.py edits the deployment's copy: a new version)
git ls-files -z dags native deploy examples/tokenizer-c | tar --null -T - -c | tar -x -C "$work/project"
cp plans/smoke.yaml tests/compose/plans/*.yaml "$work/project/plans/"
chown -R 50000:0 "$work/storage"
chmod -R a+rX "$work/project"
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
secret() { "$PY" -c 'import secrets; print(secrets.token_hex(32))'; }
umask 077
cat >"$env_file" <<EOF
# written by scripts/test_compose.sh: the test deployment (deploy/env.example documents each value)
COMPOSE_FILE=docker-compose.yml:deploy/compose.debian.yml
GCBENCH_DEBIAN_BASE_IMAGE=$BASE_IMAGE
GCBENCH_BASE_IMAGE=$BASE_IMAGE
GCBENCH_PROJECT_DIR=$work/project
GCBENCH_STORAGE_DIR=$work/storage
AIRFLOW_UID=50000
DOCKER_GID=$(stat -c %g "$socket")
GCBENCH_DOCKER_SOCKET=$socket
GCBENCH_GPUS=0,1,2
GCBENCH_DOCKER_GPUS=none
GCBENCH_BIND_ADDRESS=127.0.0.1
AIRFLOW_PORT=$(free_port)
GCBENCH_DB_PORT=$(free_port)
POSTGRES_PASSWORD=$(secret)
AIRFLOW_DB_PASSWORD=$(secret)
GCBENCH_DB_PASSWORD=$(secret)
AIRFLOW_FERNET_KEY=$("$PY" -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')
AIRFLOW_SECRET_KEY=$(secret)
AIRFLOW_JWT_SECRET=$(secret)
GCBENCH_ADMIN_USER=admin
GCBENCH_ADMIN_PASSWORD=$(secret)
REDIS_PASSWORD=$(secret)
EOF
umask 022

# ---------------------------------------------------------------- images
gcb_step "images: Airflow 3.3.2, PostgreSQL and Redis from Debian packages on $BASE_IMAGE (deploy/compose.debian.yml)"
build_started=$(date +%s)
if ! compose --profile celery --profile gpu-worker build --progress plain >"$STATE/build-compose.log" 2>&1; then
    tail -60 "$STATE/build-compose.log" >&2
    echo "docker compose build failed (log: $STATE/build-compose.log)" >&2
    exit 1
fi
build_s=$(( $(date +%s) - build_started ))
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^gcbench/' | sort
if [ "${GCBENCH_PREPARE_ONLY:-0}" = 1 ]; then  # .ci/run: images now, tests later
    gcb_step "images ready (GCBENCH_PREPARE_ONLY=1: no tests)"
    exit 0
fi

# ---------------------------------------------------------------- tests
gcb_step "pytest tests/compose"
tests_started=$(date +%s)
export GCBENCH_REQUIRE_DOCKER=1 GCBENCH_COMPOSE_ENV_FILE="$env_file" GCBENCH_COMPOSE_PROJECT="$project" \
    GCBENCH_TEST_TRIAL_IMAGE="$TRIAL_IMAGE" GCBENCH_COMPOSE_TIMINGS="$work/timings.json"
rm -f "$work/timings.json"
rc=0
# shellcheck disable=SC2086
"$PY" -m pytest -q -p no:cacheprovider -m compose tests/compose ${PYTEST_ARGS:-} || rc=$?
tests_s=$(( $(date +%s) - tests_started ))
if [ -f "$work/timings.json" ]; then
    "$PY" -c 'import json, sys; [print(f"  {k}: {v:.0f}" + (" s" if "retried" not in k else "")) for k, v in json.load(open(sys.argv[1])).items()]' "$work/timings.json"
fi
total_s=$(( $(date +%s) - gcb_started_at ))
echo "test-compose figures: compose build ${build_s}s, tests ${tests_s}s, whole target ${total_s}s" \
     "(CI budget: 1200 s cold, 480 s warm)"
exit $rc
