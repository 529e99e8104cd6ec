#!/usr/bin/env bash
# Every test of the workspace, plus the formatting and lint gates.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_build_deps
ensure_test_deps
# One build per run: incremental artifacts would only double the disk it needs.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --locked --workspace --all-targets -q -- -D warnings
echo "== openapi (docs/openapi.yaml is valid OpenAPI 3.1)"
scripts/check-openapi.sh
echo "== cargo deny (licenses, bans, sources; deny.toml)"
cargo deny --log-level error check licenses bans sources
echo "== cargo test"
mkdir -p target
# Lines tests leave about what they could or could not check on this machine.
rm -rf target/tmp/test-notes
status=0
cargo test --locked --workspace --no-fail-fast 2>&1 | tee target/test-output.txt || status=$?
# The IPS's searches run on Vectorscan where the build found it; its own hashed
# engine (the fallback, and what a build without libhs uses) is tested too.
if [ "$status" -eq 0 ]; then
    echo "== cargo test -p sluice-ips with the hashed search (SLUICE_IPS_MPM=hashed)"
    SLUICE_IPS_MPM=hashed cargo test --locked -p sluice-ips 2>&1 | tee target/test-output-hashed.txt || status=$?
    grep -h '^test result:' target/test-output-hashed.txt >>target/test-output.txt || true
fi
# The store must also work with Valkey: the tests that start their own stores run
# again with valkey-server (the state backends, and whole chains on 1-4 instances
# sharing one store, standalone and cluster).
if [ "$status" -eq 0 ] && command -v valkey-server >/dev/null 2>&1; then
    echo "== cargo test against Valkey ($(valkey-server --version | cut -d' ' -f1-3))"
    SLUICE_REDIS_SERVER=valkey-server cargo test --locked -p sluice-state-redis -p sluice-builtin \
        2>&1 | tee target/test-output-valkey.txt || status=$?
    grep -h '^test result:' target/test-output-valkey.txt >>target/test-output.txt || true
else
    echo "note: the Valkey pass did not run (no valkey-server, or tests failed)"
fi
cat target/tmp/test-notes/*.txt 2>/dev/null || true
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' target/test-output.txt
exit "$status"
