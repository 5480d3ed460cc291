#!/usr/bin/env bash
# Jepsen-style chaos on real processes (docs/chaos.md): four replicas in
# network namespaces, toxiproxy between them, delay / loss / partitions /
# SIGKILL / SIGSTOP under a recorded workload, then the history is checked.
# Needs root and `ip netns`. About 5 minutes.
#
#   scripts/chaos.sh            full run, mode pbft
#   scripts/chaos.sh cop        full run, mode cop
#   scripts/chaos.sh sarek      full run, mode sarek (two partitions)
#   scripts/chaos.sh pbft smoke the under-a-minute variant
#
# Environment: CHORUS_TOXIPROXY (server binary; installed with `go install`
# into target/chaos-tools when unset and missing), CHORUS_CHAOS_SEED,
# CHORUS_CHAOS_KEEP=1 (keep logs and history.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-pbft}"
variant="${2:-full}"
if [ "$(id -u)" != 0 ]; then
  echo "chaos: needs root (network namespaces); skipped" >&2
  exit 0
fi
tools="$PWD/target/chaos-tools"
if [ -z "${CHORUS_TOXIPROXY:-}" ]; then
  if command -v toxiproxy-server >/dev/null; then
    CHORUS_TOXIPROXY="$(command -v toxiproxy-server)"
  else
    if [ ! -x "$tools/toxiproxy-server" ]; then
      mkdir -p "$tools"
      GOBIN="$tools" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0
      mv "$tools/server" "$tools/toxiproxy-server"
    fi
    CHORUS_TOXIPROXY="$tools/toxiproxy-server"
  fi
fi
export CHORUS_TOXIPROXY
export CHORUS_CHAOS_MODE="$mode"
mkdir -p target/chaos
export CHORUS_CHAOS_REPORT="$PWD/target/chaos/report-$mode-$variant.md"
if [ "$variant" = smoke ]; then
  cargo test -p chorus-cli --test chaos chaos_smoke -- --nocapture
else
  cargo test -p chorus-cli --test chaos chaos_full -- --ignored --nocapture
fi
echo "report: $CHORUS_CHAOS_REPORT"
