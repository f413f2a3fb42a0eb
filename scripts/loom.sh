#!/usr/bin/env bash
# Model-checks the arbiter's single flight with loom: scripts/loom.sh
# Every interleaving of crates/airlock-arbiter/tests/loom.rs (two admissions; two admissions
# while a node takes a model), with the arbiter's own Mutex/Condvar swapped for loom's.
# `--cfg loom` goes through RUSTFLAGS, which would rebuild every crate of the normal target
# dir; a separate one (target/loom) keeps the workspace's builds intact. Release mode: loom
# runs each interleaving as real code, and the optimizer makes that several times faster.
# Costs about 1 min on 2 cores when nothing is built yet (compiling loom and its tracing
# dependencies), a few seconds afterwards.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-$root/target/loom}"
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
# Thin LTO buys nothing for a test binary and costs most of the link time.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=0
# Loom's own knobs pass through (LOOM_MAX_PREEMPTIONS, LOOM_LOG, LOOM_LOCATION, ...).
start=$(date +%s)
cargo test -p airlock-arbiter --release --test loom -- --nocapture
echo "loom: passed in $(($(date +%s) - start)) s"
