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
#      image gets torch from a local CPU wheel, never a download), and the example user
#      image of kind: container (examples/container, nothing of GC-Bench inside);
#   5. gets a Docker Compose v2 to validate docker-compose.yml;
#   6. runs pytest on tests/docker (smoke plan with --runner docker, failure policy,
#      compose config) with GCBENCH_REQUIRE_DOCKER=1, so nothing passes by skipping;
#   7. on exit: removes GC-Bench's containers and stops the daemon it started.
#
# The machinery (engine, base image, builds, compose) is scripts/docker_lib.sh, shared
# with make test-compose (scripts/test_compose.sh).
# Environment: GCBENCH_DOCKER_ROOT (default /var/tmp/gcbench-docker; kept between runs so
# the base image and build layers are reused), GCBENCH_TORCH_WHEEL (a torch wheel for
# CPython 3.11; default /opt/wheels/torch-*+cpu-cp311-*.whl), GCBENCH_DOCKER_KEEP=1
# (leave the daemon running), PYTEST_ARGS (extra pytest arguments), GCBENCH_PREPARE_ONLY=1
# (build the images, run no test: .ci/run builds them while the Python tests run).
set -euo pipefail
cd "$(dirname "$0")/.."
GCB_NAME=docker
# shellcheck source=scripts/docker_lib.sh
. scripts/docker_lib.sh

gcb_packages
gcb_engine
gcb_base_image
gcb_trial_images
gcb_step "a user's own image (examples/container/Dockerfile: the Debian base and a shell program, no GC-Bench)"
USER_IMAGE=gcbench-example/marked:1
gcb_build example-user --build-arg "BASE=$BASE_IMAGE" -f examples/container/Dockerfile -t "$USER_IMAGE" examples
export GCBENCH_TEST_USER_IMAGE="$USER_IMAGE"
gcb_compose_v2
if [ "${GCBENCH_PREPARE_ONLY:-0}" = 1 ]; then  # .ci/run: images now, tests later
    gcb_step "images ready (GCBENCH_PREPARE_ONLY=1: no tests)"
    exit 0
fi

gcb_step "pytest tests/docker"
export GCBENCH_REQUIRE_DOCKER=1 GCBENCH_DOCKER_GPUS="${GCBENCH_DOCKER_GPUS:-none}" GCBENCH_TEST_TRIAL_IMAGE="$TRIAL_IMAGE"
# shellcheck disable=SC2086
"$PY" -m pytest -q -p no:cacheprovider -m docker tests/docker ${PYTEST_ARGS:-}
