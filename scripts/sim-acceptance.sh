#!/usr/bin/env bash
# The simulator runs that issue 8 ("Hardening the PBFT lane") must pass, with
# 0 violations, recorded in docs/sim.md. Runs JOBS configurations at once.
#
#   scripts/sim-acceptance.sh               # every configuration, full seed counts
#   SCALE=10 scripts/sim-acceptance.sh      # a tenth of the seeds (quick check)
#   EXTRA=--no-view-check scripts/sim-acceptance.sh
#
# Logs go to $OUT (default target/sim-acceptance/), one file per configuration;
# the script exits non-zero if any configuration reported a violation.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-1}
JOBS=${JOBS:-2}
OUT=${OUT:-target/sim-acceptance}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
cargo build --release -q -p chorus-cli
B=./target/release/chorus
s() { echo $(( ($1 + SCALE - 1) / SCALE )); }

heavy4="--mode cop --pillars 4 --n 4 --faults all --clients 8 --requests 150 --fault-window-ms 25000"
heavy7="--mode cop --pillars 4 --n 7 --faults all --clients 8 --requests 60 --fault-window-ms 15000"
configs=(
  "cop4-fixed|$heavy4 --rotation fixed --seed 3000000 --seeds $(s 300)"
  "cop4-blockwise|$heavy4 --rotation block-wise --seed 3000000 --seeds $(s 300)"
  "cop7-fixed|$heavy7 --rotation fixed --seed 3100000 --seeds $(s 50)"
  "cop7-blockwise|$heavy7 --rotation block-wise --seed 3100000 --seeds $(s 50)"
  "cop13|--mode cop --pillars 4 --n 13 --faults all --requests 8 --seed 3200000 --seeds $(s 50)"
  "cop16|--mode cop --pillars 4 --n 16 --faults all --requests 8 --seed 3300000 --seeds $(s 50)"
)

run() {
  local name=${1%%|*} args=${1#*|}
  # shellcheck disable=SC2086
  if $B sim $args $EXTRA >"$OUT/$name.log" 2>&1; then r=ok; else r=FAILED; fi
  printf '%-16s %-7s %s\n' "$name" "$r" "$(grep -m1 'seeds run' "$OUT/$name.log" | sed 's/^ *//')"
}
export -f run
export B OUT EXTRA
printf '%s\n' "${configs[@]}" | xargs -P "$JOBS" -I{} bash -c 'run "$@"' _ {} | tee "$OUT/summary.txt"
! grep -q FAILED "$OUT/summary.txt"
