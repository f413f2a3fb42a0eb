#!/usr/bin/env bash
# Runs each airlock-wire fuzz target briefly: scripts/fuzz-short.sh [SECONDS] (default 20).
# Needs cargo-fuzz (`cargo install cargo-fuzz`). Only a stable toolchain is assumed:
# RUSTC_BOOTSTRAP=1 lets stable accept the nightly-only sanitizer flags cargo-fuzz passes.
# Targets build with debug assertions (and so overflow checks) on.
# Without cargo-fuzz it prints a skip message and exits 0. Per target it prints libFuzzer's last
# status line (execs, coverage, features, corpus) and final stats; FUZZ_LOG_DIR=dir keeps the
# full logs there. `make test` does not run this: it runs the libFuzzer-free seeded mutation
# run in crates/airlock-wire/tests/fuzz_short.rs instead (same target functions, no toolchain).
set -euo pipefail

seconds="${1:-${FUZZ_SECONDS:-20}}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz="$root/fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-short: SKIPPED - cargo-fuzz is not installed (cargo install cargo-fuzz)"
    exit 0
fi

targets=(frame_decoder value_decoder)
cd "$fuzz"
export RUSTC_BOOTSTRAP=1
if ! build_log="$(cargo fuzz build --debug-assertions 2>&1)"; then
    echo "$build_log" | tail -n 20
    echo "fuzz-short: SKIPPED - cargo fuzz build failed on this toolchain"
    exit 0
fi

log_dir="${FUZZ_LOG_DIR:-}"
if [ -n "$log_dir" ]; then mkdir -p "$log_dir"; fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
    corpus="$fuzz/corpus/$t"
    mkdir -p "$corpus"
    echo "fuzz-short: $t for ${seconds}s"
    # New inputs go to corpus/ (git-ignored); the checked-in seeds are only read.
    status=0
    cargo fuzz run --debug-assertions "$t" "$corpus" "$fuzz/seeds/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1 ||
        status=$?
    if [ -n "$log_dir" ]; then cp "$log" "$log_dir/$t.log"; fi
    # The last status line: #execs, cov (edges), ft (features), corp (entries/size), exec/s.
    grep -E '^#[0-9]+' "$log" | tail -n 1 || true
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$log"
        echo "fuzz-short: $t FAILED (exit $status); the crashing input is under fuzz/artifacts/$t/"
        exit "$status"
    fi
done
echo "fuzz-short: all targets passed"
