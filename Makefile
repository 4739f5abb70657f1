# GC-Bench. The README's two commands:
#   make demo   set up, then run plans/smoke.yaml and print where the report is
#   make test   set up, then lint and run every test (Python, Go, Rust)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gcbench-installed
BENCH_STAMP := $(VENV)/.gcbench-bench-installed
EXAMPLES_STAMP := $(VENV)/.gcbench-examples-installed

.PHONY: setup examples system-deps demo lint test test-python test-native test-docker test-compose test-export bench gpu-check gpu-wheels gpu-studies clean

$(STAMP): pyproject.toml setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU wheel on this kind of machine's local disk
	$(PY) -m pip install -q "torch==2.13.0"
	# an older editable install left its egg-info on sys.path (plugins/): Airflow would load
	# the gcbench plugin twice ("already registered"); the egg-info now lives in the package
	rm -rf plugins/gcbench.egg-info
	$(PY) -m pip install -q -e ".[test,export]"
	touch $(STAMP)

setup: $(STAMP)

# The examples of docs/your-own-workload.md: a third-party workload kind (a Hugging Face
# causal LM, installed as its own package with its entry point; brings transformers) and
# the C program of kind: command (cc).
$(EXAMPLES_STAMP): $(STAMP) examples/hf-causal-lm/pyproject.toml
	$(PY) -m pip install -q -e examples/hf-causal-lm
	touch $(EXAMPLES_STAMP)

examples: $(EXAMPLES_STAMP)
	$(MAKE) -s -C examples/command

# The benchmarks' anchors (tiktoken, Hugging Face tokenizers): pyproject's bench extra.
# The tokenizer tests use them too (their equivalence tests skip without them).
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	touch $(BENCH_STAMP)

# Debian packages the tests need (Go for the Go tokenizer, Chromium for the UI tests,
# pdflatex with booktabs for the paper table's LaTeX test, ipmitool and OpenIPMI's ipmi_sim
# for the node meter's tests against an emulated BMC).
system-deps:
	@bash scripts/system_deps.sh go cargo chromium latex ipmi

demo: setup
	@bash scripts/system_deps.sh go cargo
	$(VENV)/bin/gcbench run plans/smoke.yaml

# ruff check and ruff format --check over the repository, mypy on plugins/gcbench (settings in
# pyproject.toml; ruff and mypy come with its test extra, the anchors of the bench extra are
# type-checked where the package calls them)
lint: setup $(BENCH_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: setup system-deps
	$(MAKE) lint
	$(MAKE) test-native
	$(MAKE) test-python

# The Redfish emulator sushy-tools (PyPI) in a venv of its own (its Flask would move Airflow's
# pins): the node meter's Redfish client is read against it (GCBENCH_TEST_SUSHY). It serves
# chassis but no power readings; the tests check that GC-Bench says so.
SUSHY_VENV := .gcbench-test/sushy
SUSHY_VERSION ?= 2.2.0
$(SUSHY_VENV)/bin/sushy-emulator:
	rm -rf $(SUSHY_VENV)
	$(PYTHON) -m venv $(SUSHY_VENV)
	$(SUSHY_VENV)/bin/pip install -q "sushy-tools==$(SUSHY_VERSION)"

# two pytest sessions at once (scripts/pytest_halves.sh; GCBENCH_PYTEST_SERIAL=1: one)
test-python: setup $(BENCH_STAMP) examples $(SUSHY_VENV)/bin/sushy-emulator
	GCBENCH_TEST_SUSHY=$(abspath $(SUSHY_VENV))/bin/sushy-emulator PY=$(PY) bash scripts/pytest_halves.sh

test-native:
	@if [ -d native/go ]; then cd native/go && go test ./...; fi
	@if [ -d native/rust ]; then cd native/rust && cargo test --release --offline -q; fi

# Real Docker: own dockerd, debootstrap base image, images/ built on it, smoke plan with
# the docker runner, failure policy, compose validation (scripts/test_docker.sh).
test-docker: setup
	bash scripts/test_docker.sh

# docker-compose.yml for real: images built without Docker Hub (deploy/compose.debian.yml),
# up --wait, driven over Airflow's REST API, postgres restarted, down/up, Celery with two
# GPU-host workers (scripts/test_compose.sh; prints its build and test times).
test-compose: setup
	bash scripts/test_compose.sh

# The exports (MLflow against a real `mlflow server`, the Prometheus endpoint scraped during
# a run): mlflow gets a venv of its own under .gcbench-test/ (its dependencies would move
# Airflow's pins; GC-Bench talks REST to it), made from PyPI on a fresh machine.
# GCBENCH_REQUIRE_MLFLOW=1: a missing mlflow or prometheus_client fails, never skips (CI).
MLFLOW_VENV := .gcbench-test/mlflow
MLFLOW_VERSION ?= 3.17.2
$(MLFLOW_VENV)/bin/mlflow:
	rm -rf $(MLFLOW_VENV)
	$(PYTHON) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/pip install -q "mlflow==$(MLFLOW_VERSION)"

test-export: setup $(MLFLOW_VENV)/bin/mlflow
	GCBENCH_REQUIRE_MLFLOW=1 GCBENCH_TEST_MLFLOW=$(abspath $(MLFLOW_VENV))/bin/mlflow \
	    $(PY) -m pytest -q -p no:cacheprovider -rs tests/export

bench: setup $(BENCH_STAMP)
	@bash scripts/system_deps.sh go cargo
	$(PY) benchmarks/run_all.py

# The GPU day (docs/measurement.md, "GPU check"). gpu-check runs on a bare lent GPU
# machine with its own python3 (torch+CUDA, numpy, nvidia-ml-py, PyYAML) in about two
# minutes: the 1-s average power's lag, the counter cross-check on a steady and a bursty
# load with its verdict, the sampler's overhead; one page, and the same as JSON in
# GPU_RESULTS. pydantic comes from the wheels that gpu-wheels downloads here beforehand
# (PyPI needed; .whl/ is git-ignored and carried to the device). gpu-studies runs short
# versions of both studies (under 5 minutes) the same way. Without a CUDA GPU both exit 2
# and write nothing; the CPU check of the studies' page is
# `bash scripts/gpu_check.sh /tmp/out studies --dry-run` (docs/studies.md).
GPU_RESULTS ?= docs/gpu-results
GPU_PYVER ?= 3.12
GPU_WHEELS = pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
	typing-extensions==4.16.0

gpu-wheels:
	rm -rf .whl && mkdir -p .whl
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYVER) --implementation cp \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    -d .whl $(GPU_WHEELS)

gpu-check:
	bash scripts/gpu_check.sh $(GPU_RESULTS)

gpu-studies:
	bash scripts/gpu_check.sh $(GPU_RESULTS) studies $(GPU_STUDIES_ARGS)

clean:
	rm -rf .gcbench reports
