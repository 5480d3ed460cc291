#!/usr/bin/env bash
# The whole test suite: unit, property, simulator (200+ seeds per mode and fault
# kind), and integration tests with real replica processes.
set -euo pipefail
cd "$(dirname "$0")/.."
# Sans-IO: the protocol crates must not depend on an async runtime or sockets.
for c in chorus-core chorus-order chorus-exec; do
  if cargo tree -p "$c" -e normal --prefix none | grep -Eq '^(tokio|mio|socket2) '; then
    echo "sans-IO violation: $c depends on an I/O runtime" >&2
    exit 1
  fi
done
cargo test --workspace "$@"
# The checkers must bite when a quorum is weakened behind a test-only switch.
cargo test -p chorus-sim --features weak-quorum --test checkers_bite "$@"
# sarek: the serial-order (cross-border atomicity) checker must catch an
# executor that skips the SYNC wait (test-only feature).
cargo test -p chorus-sim --features skip-sync-wait --test sarek "$@"
