# GC-Bench. The README's two commands:
#   make demo   set up, then run plans/smoke.yaml and print where the report is
#   make test   set up, then run every test (Python, Go, Rust)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gcbench-installed

.PHONY: setup system-deps demo test test-python test-native test-docker test-compose bench gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: 2.13.0 is the CPU wheel on this kind of machine's local disk
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

# Debian packages the tests need (Go for the Go tokenizer, Chromium for the UI tests).
system-deps:
	@bash scripts/system_deps.sh go cargo chromium

demo: setup
	@bash scripts/system_deps.sh go cargo
	$(VENV)/bin/gcbench run plans/smoke.yaml

test: setup system-deps
	$(MAKE) test-native
	$(MAKE) test-python

test-python: setup
	$(PY) -m pytest -q -p no:cacheprovider

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

bench: setup
	$(PY) benchmarks/run_all.py

# On a GPU machine: NVML facts, edge correction and sampler overhead, then a short
# version of both studies (each under 5 minutes).
gpu-check: setup
	$(PY) scripts/gpu_check.py
	$(PY) scripts/gpu_check_studies.py

clean:
	rm -rf .gcbench reports
