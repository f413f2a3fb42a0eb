# comfy-airlock developer entry points. Tools are called from .venv explicitly; no activated
# venv is needed. Environments are created by scripts/bootstrap.sh (idempotent, stamp-based).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

VENV        := $(CURDIR)/.venv
PY          := $(VENV)/bin/python
RUFF        := $(VENV)/bin/ruff
MATURIN     := $(VENV)/bin/maturin
PY_DIRS     := python tests bench examples custom_node
# Extra pytest arguments: `make test PYTEST_ARGS="-k wire -x"`. PYTEST_ADDOPTS in the
# environment is honoured by pytest directly (make passes the environment through).
PYTEST_ARGS ?=
FUZZ_SECONDS ?= 60
# The real ComfyUI 0.30.0 tree for tests/comfyui. `make setup` (scripts/bootstrap.sh ->
# scripts/comfyui.sh) provisions it here; tests read $COMFYUI_DIR. Point it at another ComfyUI
# to test against that one (a tree the script did not make is used as it is, never changed).
COMFYUI_DIR ?= $(CURDIR)/.cache/comfyui/0.30.0/ComfyUI
export COMFYUI_DIR

# pyo3's build script (cargo clippy/test as well as maturin) uses the venv interpreter, so all
# cargo invocations agree on the Python config and don't invalidate each other's builds.
export PYO3_PYTHON := $(PY)

# Tools run with the venv "active" (maturin finds zig and the interpreter through it).
VENV_ENV := VIRTUAL_ENV="$(VENV)" PATH="$(VENV)/bin:$$PATH"

.PHONY: setup build wheel lint test bench bench-quick demo run fmt clean fuzz faults lock

# Host venv (also ComfyUI's), worker envs, and the ComfyUI tree at $(COMFYUI_DIR).
setup:
	bash scripts/bootstrap.sh

# The zig-linked wheel (scripts/wheel.sh), installed editable into .venv (scripts/develop.sh):
# one release build serves the tests and the wheel test.
build: setup
	bash scripts/develop.sh
	$(PY) -c 'from comfy_airlock.compat import install_pth; install_pth()'

# The wheel users install (dist/comfy_airlock-*-cp310-abi3-manylinux_2_28_x86_64.whl, zig-linked;
# scripts/wheel.sh). Cached by its inputs' hash; tests/comfyui/test_wheel_install.py installs it
# into a fresh venv without Rust and runs a pack from it, so `make test` builds it too.
wheel: setup
	bash scripts/wheel.sh

# lint-imports checks the layers and the absence of import cycles in comfy_airlock
# (.importlinter); it reads the sources and imports nothing, so it runs before the build.
lint: setup
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(RUFF) check $(PY_DIRS)
	$(RUFF) format --check $(PY_DIRS)
	PYTHONPATH=$(CURDIR)/python $(VENV)/bin/lint-imports

# Lint first (fails fast, before the release build), then build, Rust tests, Python tests
# (the 15 slowest listed at the end: `make test` should stay under 30 minutes). The Python
# tests run in PYTEST_JOBS processes (pytest-xdist; a test file stays in one, so its module
# fixtures run once; ADR 0043): in one process the suite kept one of two cores busy (29.5 min
# on two cores; 17.6 min in two processes). PYTEST_JOBS=0 runs it in this process, in order,
# and is the default on a one-core machine.
PYTEST_JOBS ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 0)
test: lint build
	cargo test --workspace
	bash scripts/loom.sh
	$(VENV_ENV) $(PY) -m pytest -q -n $(PYTEST_JOBS) --dist loadfile --durations=15 tests $(PYTEST_ARGS)

# Side by side with comfy-env 0.4.46, pyisolate 0.10.2 (PyPI, in .envs/bench made by
# bench/setup.sh) and a plain pickle worker, ComfyUI-shaped workers, the native floors, in one run:
# bench/out/compare.{json,md,png}. Then the fresh-output rows again with the harness (the host)
# itself not spinning its OpenMP threads (compare-host-passive.json), the OpenMP wait policies
# of a worker under each host policy (threads*.json, ADR 0028), a worker's cold start step
# by step against a bare interpreter (cold_start.json), a prompt over HTTP isolated against
# native (prompt.json), the memory scenarios (bench/memory_plot.py, ~3 min: memory.{json,md},
# docs/memory-headline.png), eviction, and comfy-airlock alone against the floors (results.json).
# bench-quick: a short version of the comparisons (a few minutes).
BENCH_PY := $(CURDIR)/.envs/bench/bin/python
FRESH_CASES := fresh_1048576,fresh_67108864,fresh_536870912,echo_1048576

bench: build
	bash bench/setup.sh
	$(BENCH_PY) bench/compare.py
	OMP_WAIT_POLICY=PASSIVE $(BENCH_PY) bench/compare.py --rounds 3 --cases $(FRESH_CASES) \
		--out bench/out/compare-host-passive.json
	$(BENCH_PY) bench/fresh_parts.py > bench/out/fresh_parts.jsonl
	$(VENV_ENV) $(PY) bench/threads.py
	OMP_WAIT_POLICY=PASSIVE $(VENV_ENV) $(PY) bench/threads.py --out bench/out/threads-host-passive.json
	$(VENV_ENV) $(PY) bench/cold_start.py
	$(VENV_ENV) $(PY) bench/prompt.py
	$(BENCH_PY) bench/memory_plot.py --python $(PY)
	$(VENV_ENV) $(PY) bench/eviction.py
	$(VENV_ENV) $(PY) bench/run.py

bench-quick: build
	bash bench/setup.sh
	$(BENCH_PY) bench/compare.py --quick
	$(VENV_ENV) $(PY) bench/cold_start.py --rounds 2
	$(VENV_ENV) $(PY) bench/prompt.py --rounds 2 --prompts 2
	$(VENV_ENV) $(PY) bench/run.py --quick

# Real ComfyUI on CPU with comfy-airlock and the example packs: a workflow over HTTP, the
# result and the worker table printed, the server stopped. `make run` leaves it serving.
demo: build
	$(VENV_ENV) $(PY) examples/demo_comfyui.py

run: build
	$(VENV_ENV) $(PY) examples/demo_comfyui.py --keep $(if $(PORT),--port $(PORT))

fmt: setup
	cargo fmt --all
	$(RUFF) check --fix --select I $(PY_DIRS)
	$(RUFF) format $(PY_DIRS)

clean:
	rm -rf target .venv .envs

# Runs each cargo-fuzz target (fuzz/) for FUZZ_SECONDS, installing cargo-fuzz if needed.
# Stable Rust is enough (scripts/fuzz-short.sh sets RUSTC_BOOTSTRAP for the sanitizer flags).
# FUZZ_LOG_DIR=dir keeps libFuzzer's logs. `make test` runs the libFuzzer-free short run
# instead (crates/airlock-wire/tests/fuzz_short.rs, the same target code, a few seconds).
fuzz:
	cargo fuzz --version >/dev/null 2>&1 || cargo install --locked cargo-fuzz
	bash scripts/fuzz-short.sh $(FUZZ_SECONDS)

# The fault-injection suite alone (tests/faults, docs/reliability.md; `make test` runs it too):
# FAULT_SCALE multiplies its iterations (a soak), FAULT_SEED replays a run's random choices.
FAULT_SCALE ?= 1
faults: build
	AIRLOCK_FAULT_SCALE=$(FAULT_SCALE) $(if $(FAULT_SEED),AIRLOCK_FAULT_SEED=$(FAULT_SEED)) \
		$(VENV_ENV) $(PY) -m pytest -q tests/faults $(PYTEST_ARGS)

# Re-resolves the pinned requirement files from their .in files (every transitive pin).
lock: setup
	$(VENV)/bin/uv pip compile -q --python-version 3.11 requirements/dev.in -o requirements/dev.txt
	$(VENV)/bin/uv pip compile -q --python-version 3.10 requirements/worker-py310-numpy1.in -o requirements/worker-py310-numpy1.txt
	$(VENV)/bin/uv pip compile -q --python-version 3.12 requirements/worker-py312-torch.in -o requirements/worker-py312-torch.txt
