#!/usr/bin/env bash
# The GPU check on a bare lent GPU machine (make gpu-check; docs/measurement.md, "GPU check").
#
# Uses the machine's own python3 (torch with CUDA, numpy, nvidia-ml-py, PyYAML); pydantic
# and its needs, which such a machine lacks, are installed from the wheels in .whl/
# (made beforehand where PyPI is reachable: make gpu-wheels) into a folder of their own.
# No virtual environment, Airflow or PostgreSQL is needed.
#
# Usage: scripts/gpu_check.sh [RESULTS_DIR]           the check (default docs/gpu-results; on the device: $OUT)
#        scripts/gpu_check.sh RESULTS_DIR studies [ARGS]  short versions of both studies instead (under 5
#                                                   minutes), ending with each factor's predicted and measured
#                                                   direction (docs/studies.md); ARGS e.g. --dry-run
# Without a CUDA GPU both exit with status 2 and write nothing; "studies --dry-run" prints the studies'
# page on the CPU with the simulated device and writes RESULTS_DIR/gpu-studies-dry-run-summary.json.
# Environment: GPU_PYTHON (python3; for "studies --dry-run" the project's .venv/bin/python where there is
#              one, since the dry run runs here and this machine's python3 may lack torch),
#              WHEELHOUSE (.whl), GPU_SITE (/tmp/gcbench-gpu-site),
#              GPU_STUDIES_DIR (.gcbench/gpu-studies: the studies' trial folders; relative to the repository),
#              GPU_CHECK_TIMEOUT_S (450: the check must end inside one 8-minute device call).
set -euo pipefail
cd "$(dirname "$0")/.."
dry=no
if [ "${2:-}" = studies ]; then
    for arg in "${@:3}"; do
        case $arg in --dry-run) dry=yes ;; esac
    done
fi
if [ -n "${GPU_PYTHON:-}" ]; then
    py=$GPU_PYTHON
elif [ $dry = yes ] && [ -x .venv/bin/python ]; then
    # only the dry run: on the GPU machine the device's own python3 (CUDA torch) is the one to use
    py=$PWD/.venv/bin/python
    echo "gpu-studies: dry run with $py (GPU_PYTHON unset)" >&2
else
    py=python3
fi
wheels=${WHEELHOUSE:-.whl}
site=${GPU_SITE:-/tmp/gcbench-gpu-site}
out=${1:-docs/gpu-results}
if ! "$py" -c 'import pydantic' 2>/dev/null; then
    if compgen -G "$wheels/*.whl" >/dev/null; then
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl
    else
        echo "gpu-check: FAILED: $py has no pydantic and $wheels/ holds no wheels; run 'make gpu-wheels' where PyPI" \
             "is reachable and carry $wheels to this machine" >&2
        exit 2
    fi
fi
export PYTHONPATH="$site:$PWD/plugins${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ "${2:-}" = studies ]; then
    # trial folders stay in GPU_STUDIES_DIR; only the summary goes to RESULTS_DIR. Further
    # arguments go to gpu_check_studies.py (--dry-run: the same page on the CPU, simulated)
    # absolute: the external tokenizers are built in their own source folders
    work=${GPU_STUDIES_DIR:-.gcbench/gpu-studies}
    case $work in /*) ;; *) work=$PWD/$work ;; esac
    # without CUDA (and no --dry-run) the script exits 2 here and nothing reaches RESULTS_DIR
    timeout "${GPU_CHECK_TIMEOUT_S:-450}" "$py" scripts/gpu_check_studies.py --out "$work" "${@:3}"
    name=gpu-studies-summary.json
    [ $dry = no ] || name=gpu-studies-dry-run-summary.json
    mkdir -p "$out" && cp "$work/summary.json" "$out/$name"
    exit 0
fi
exec timeout "${GPU_CHECK_TIMEOUT_S:-450}" "$py" scripts/gpu_check.py --out-dir "$out"
