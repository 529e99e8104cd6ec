#!/usr/bin/env bash
# Every test of the workspace, plus the formatting and lint gates.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_build_deps
ensure_test_deps
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --locked --workspace --all-targets -q -- -D warnings
echo "== cargo test"
mkdir -p target
cargo test --locked --workspace --no-fail-fast 2>&1 | tee target/test-output.txt
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' target/test-output.txt
