#!/usr/bin/env bash
# Two builds side by side, alternating (BENCHMARKS.md: compare as ratios
# measured in alternating runs). Each build is a directory holding a
# `chorus` binary (the name matters: scripts/thread_cpu.py finds replicas by
# it). Rows are BUILD:PILLARS:EAGER:MODE, EAGER `-` for the default or 1 to
# force `CHORUS_EAGER_PREPARES=1`; the second round runs them in reverse.
#
#   scripts/bench-ab.sh BASE_DIR NEW_DIR [SECONDS] [ROW...]
#
# Used for the pillar pre-check on 16 cores (BENCHMARKS.md, 2026-11-27
# "checked in the pillars").
set -uo pipefail
BASE=${1:?usage: bench-ab.sh BASE_DIR NEW_DIR [SECONDS] [ROW...]}
NEW=${2:?usage: bench-ab.sh BASE_DIR NEW_DIR [SECONDS] [ROW...]}
SECS=${3:-5}
shift $(($# < 3 ? $# : 3))
ROWS=("$@")
[ ${#ROWS[@]} -eq 0 ] && ROWS=(base:1:-:cop new:1:-:cop new:4:-:cop base:4:-:cop base:16:-:cop new:16:-:cop)
echo "== $(date -u +%T) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
one() { # round build pillars eager mode
  local dir=$BASE label=$2 e=$4
  [ "$2" = new ] && dir=$NEW
  [ "$e" = 1 ] && label="$2+e"
  [ "$e" = - ] && e=
  CHORUS_EAGER_PREPARES=$e "$dir/chorus" bench --service null --mode "$5" --request-bytes 512 \
    --warmup 1 --duration "$SECS" --clients 32 --in-flight 32 --pillars "$3" --out "/tmp/bench-ab-$2-$3" 2>&1 |
    grep -E "^run|error \(" | sed "s/^run/r$1 $label $5 p=$3/"
}
for r in 1 2; do
  order=("${ROWS[@]}")
  [ $r = 2 ] && order=($(printf '%s\n' "${ROWS[@]}" | tac))
  for row in "${order[@]}"; do
    IFS=: read -r b p e m <<< "$row"
    one $r "$b" "$p" "$e" "$m"
  done
done
echo "== $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
