#!/usr/bin/env bash
# The whole test suite: unit, property, simulator (200+ seeds per mode and fault
# kind), and integration tests with real replica processes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p chorus-cli
cargo test --workspace "$@"
# The checkers must bite when a quorum is weakened behind a test-only switch.
cargo test -p chorus-sim --features weak-quorum --test checkers_bite "$@"
