#!/usr/bin/env bash
# The main job: bring up a whole Sluice deployment on this machine (three hosts and
# the tenant's VMs as network namespaces, Redis, the controller, one agent per host,
# NF instances), apply the Stratos Figure 4 tenant, run real HTTP traffic through its
# chains (nginx in the web VMs, curl from the client subnets), print what happened,
# and tear everything down. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
if [ "$(id -u)" -ne 0 ]; then
    echo "error: the testbed creates network namespaces and needs root (try: sudo $0)" >&2
    echo "       without root, './target/release/sluice demo' runs the offline chain demo" >&2
    exit 1
fi
ensure_build_deps
cargo build --release --locked -q -p sluice-cli -p sluice-agent
# Where cargo put the binaries (a shared CARGO_TARGET_DIR included).
exec "${CARGO_TARGET_DIR:-target}/release/sluice" testbed demo --dir out/testbed "$@"
