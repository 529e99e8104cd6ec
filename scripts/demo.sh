#!/usr/bin/env bash
# The main job, for now: generate the sample trace, run it through the sample chain
# (firewall -> IPS -> flow monitor) and print the verdict summary.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_build_deps
cargo build --release --locked -q -p sluice-cli
exec ./target/release/sluice demo --out out/demo "$@"
