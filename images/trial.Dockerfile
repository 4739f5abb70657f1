# The trial image: runs `python -m gcbench.trial SPEC.json OUTDIR` (gcbench/factory/docker.py).
#
# Build context: the repository root (.dockerignore keeps it to pyproject.toml,
# plugins/ and images/local/).
#
#   docker build -f images/trial.Dockerfile -t gcbench/trial:latest .
#
# By default the base is a CUDA PyTorch image, which brings torch; gcbench is installed
# without its dependencies (Airflow, pandas, ... are the orchestrator's, not the trial's)
# plus the few packages the trial entry point imports (and Hugging Face tokenizers, for a
# TinyLM plan with `tokenizer: hf`).
#
# BASE_IMAGE is a build argument so the same file builds where no registry is
# reachable, on a Debian image made with debootstrap + `docker import`
# (scripts/debian_base_image.sh). There python3 comes from Debian and torch from a wheel
# placed in images/local/ (ignored by git), named by TORCH_WHEEL:
#   cp /opt/wheels/torch-2.13.0+cpu-*.whl images/local/
#   docker build --network host --build-arg BASE_IMAGE=gcbench/debian:bookworm \
#       --build-arg TORCH_WHEEL=torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl \
#       -f images/trial.Dockerfile -t gcbench/trial:latest .
# The build never downloads torch: without torch in the base or a TORCH_WHEEL it fails.
# A CA bundle placed at images/local/ca-certificates.crt is used for pip and apt
# (machines behind a TLS-inspecting proxy).
#
# Stages: `system` (the base plus python3 and tini), `packages` (a virtual environment
# /opt/gcbench with torch from the wheel, or the base's own torch through
# --system-site-packages, and the trial's few dependencies), `runtime` (system + that
# environment + gcbench). The wheel is copied into `packages` only, so no layer of the
# final image holds it: the image carries torch once, installed.
ARG BASE_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

FROM ${BASE_IMAGE} AS system
# the CA bundle alone (README.md is always there, so the COPY never matches nothing)
COPY images/local/README.md images/local/ca-certificates.cr[t] /tmp/gcbench-ca/
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN set -eu; \
    if [ -f /tmp/gcbench-ca/ca-certificates.crt ]; then \
        mkdir -p /etc/apt/apt.conf.d; \
        echo 'Acquire::https::CaInfo "/tmp/gcbench-ca/ca-certificates.crt";' > /etc/apt/apt.conf.d/99gcbench-ca; \
    fi; \
    need=""; \
    command -v tini >/dev/null 2>&1 || need="tini"; \
    if ! command -v python >/dev/null 2>&1 || ! python -m pip --version >/dev/null 2>&1; then \
        need="$need python3 python3-venv ca-certificates"; \
    fi; \
    if [ -n "$need" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $need; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    rm -f /etc/apt/apt.conf.d/99gcbench-ca

FROM system AS packages
ARG TORCH_WHEEL=
COPY images/local/ /tmp/gcbench-local/
RUN set -eu; \
    if [ -f /tmp/gcbench-ca/ca-certificates.crt ]; then \
        export SSL_CERT_FILE=/tmp/gcbench-ca/ca-certificates.crt PIP_CERT=/tmp/gcbench-ca/ca-certificates.crt; \
    fi; \
    py=$(command -v python || command -v python3); \
    "$py" -m venv --system-site-packages /opt/gcbench; \
    if [ -n "${TORCH_WHEEL}" ]; then \
        /opt/gcbench/bin/python -m pip install "/tmp/gcbench-local/${TORCH_WHEEL}"; \
    fi; \
    /opt/gcbench/bin/python -c "import torch" 2>/dev/null || { \
        echo "torch is neither in BASE_IMAGE nor given as TORCH_WHEEL (a wheel in images/local/); refusing to download it" >&2; \
        exit 1; }; \
    /opt/gcbench/bin/python -m pip install "numpy>=1.26" "pydantic>=2.6,<3" "pyyaml>=6" "psutil>=5.9" "nvidia-ml-py>=12.535" \
        "tokenizers>=0.21"

FROM system AS runtime
COPY --from=packages /opt/gcbench /opt/gcbench
# the venv first on PATH (its python sees a CUDA PyTorch base's own torch)
ENV PATH=/opt/gcbench/bin:${PATH}
COPY pyproject.toml README.m[d] /tmp/gcbench-src/
COPY plugins/gcbench /tmp/gcbench-src/plugins/gcbench
RUN set -eu; \
    if [ -f /tmp/gcbench-ca/ca-certificates.crt ]; then \
        export SSL_CERT_FILE=/tmp/gcbench-ca/ca-certificates.crt PIP_CERT=/tmp/gcbench-ca/ca-certificates.crt; \
    fi; \
    cd /tmp/gcbench-src; \
    [ -f README.md ] || echo "GC-Bench trial image" > README.md; \
    python -m pip install --no-deps . ; \
    cd /; rm -rf /tmp/gcbench-src /tmp/gcbench-ca; \
    python -c "import gcbench.trial, gcbench.energy.meter, gcbench.workloads, torch, numpy, pydantic, yaml, psutil, pynvml; print('gcbench trial image: torch', torch.__version__)"

# The runner starts the container as the calling user (uid:gid of the Airflow worker),
# so the trial folder it writes stays the worker's; HOME and caches must be writable by
# any uid.
ENV HOME=/tmp PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /tmp
# tini as PID 1: the kernel ignores signals to a namespace's init that it does not
# handle, so without it `docker stop` would wait out its grace period and a trial that
# SIGKILLs itself would go on; -g forwards signals to the trial's whole process group
# (its sampler process included) and reaps zombies.
ENTRYPOINT ["tini", "-g", "--"]
CMD ["python", "-m", "gcbench.trial", "--help"]
