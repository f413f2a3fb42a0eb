# comfy-airlock developer entry points. Tools are called from .venv explicitly; no activated
# venv is needed. Environments are created by scripts/bootstrap.sh (idempotent, stamp-based).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

VENV        := $(CURDIR)/.venv
PY          := $(VENV)/bin/python
RUFF        := $(VENV)/bin/ruff
MATURIN     := $(VENV)/bin/maturin
PY_DIRS     := python tests bench examples
# Extra pytest arguments: `make test PYTEST_ARGS="-k wire -x"`. PYTEST_ADDOPTS in the
# environment is honoured by pytest directly (make passes the environment through).
PYTEST_ARGS ?=
FUZZ_TARGET  ?= frame_decoder
FUZZ_SECONDS ?= 60

# pyo3's build script (cargo clippy/test as well as maturin) uses the venv interpreter, so all
# cargo invocations agree on the Python config and don't invalidate each other's builds.
export PYO3_PYTHON := $(PY)

# Tools run with the venv "active" (maturin develop installs into $VIRTUAL_ENV).
VENV_ENV := VIRTUAL_ENV="$(VENV)" PATH="$(VENV)/bin:$$PATH"

.PHONY: setup build lint test bench demo fmt clean fuzz

setup:
	bash scripts/bootstrap.sh

build: setup
	$(VENV_ENV) $(MATURIN) develop --release

lint: setup
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(RUFF) check $(PY_DIRS)
	$(RUFF) format --check $(PY_DIRS)

# Lint first (fails fast, before the release build), then build, Rust tests, Python tests.
test: lint build
	cargo test --workspace
	$(VENV_ENV) $(PY) -m pytest -q tests $(PYTEST_ARGS)

bench: build
	$(VENV_ENV) $(PY) bench/run.py

demo: build
	$(VENV_ENV) $(PY) examples/demo_core.py

fmt: setup
	cargo fmt --all
	$(RUFF) check --fix --select I $(PY_DIRS)
	$(RUFF) format $(PY_DIRS)

clean:
	rm -rf target .venv .envs

# Runs the committed cargo-fuzz target (fuzz/) for FUZZ_SECONDS. cargo-fuzz needs a nightly
# toolchain and `cargo install cargo-fuzz`; explains instead of failing when either is missing.
fuzz:
	@if ! cargo fuzz --version >/dev/null 2>&1; then \
	  echo "cargo-fuzz is not installed. Install it with: cargo install cargo-fuzz"; \
	  echo "then run: make fuzz   (or: cargo +nightly fuzz run $(FUZZ_TARGET))"; \
	elif ! rustup run nightly rustc --version >/dev/null 2>&1; then \
	  echo "cargo-fuzz needs a nightly toolchain. Install it with: rustup toolchain install nightly"; \
	  echo "then run: make fuzz   (or: cargo +nightly fuzz run $(FUZZ_TARGET))"; \
	else \
	  set -x; cargo +nightly fuzz run $(FUZZ_TARGET) -- -max_total_time=$(FUZZ_SECONDS); \
	fi
