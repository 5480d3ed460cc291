#!/usr/bin/env bash
# Pillar and proposal-depth scaling of the real replica on a many-core
# machine (issue 13; BENCHMARKS.md "16 cores"). Every sweep runs a local
# cluster of 4 replica processes plus the load generator on this machine.
#
#   scripts/bench-many-cores.sh OUTDIR [CHORUS_BINARY] [SECONDS] [scaling|bound]
#
# `scaling` (the default): pillars 1…16 at proposal depth 2 and 8, and the
# depth at 1, 4 and 16 pillars. `bound`: what limits one pillar when no
# thread is saturated (load-generator threads, batch size, load, batch
# delay, mode, many clients).
#
# Leaves OUTDIR/log.txt (every run's line, thread samples), OUTDIR/all.csv
# (every run's row, first column the sweep) and OUTDIR/pillars.png.
set -uo pipefail
OUT=${1:?usage: bench-many-cores.sh OUTDIR [CHORUS_BINARY] [SECONDS]}
BIN=${2:-./target/release/chorus}
SECS=${3:-5}
WHAT=${4:-scaling}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(nproc) cores, kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
C="--service null --request-bytes 512 --warmup 1"
# 32 clients x 32 in flight: enough to keep 16 pillars' lanes fed. LOAD and
# MODE may be set per run.
run() {
  local name=$1
  shift
  local load=${LOAD:---clients 32 --in-flight 32}
  echo "== $name: ${MODE:-cop} $load $* (load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%T))"
  "$BIN" bench $C --mode "${MODE:-cop}" $load --duration "$SECS" "$@" --out "$OUT/$name" 2>&1 | grep -v '^== run'
}
# One run with a per-thread CPU sample taken in its middle.
threads() {
  local name=$1
  shift
  python3 "$HERE/thread_cpu.py" 2 $((SECS / 2 + 2)) > "$OUT/$name.threads" &
  local sampler=$!
  run "$name" "$@"
  wait $sampler # not a bare `wait`: it would wait for the `tee` above too
  cat "$OUT/$name.threads"
  rm -f "$OUT/$name.threads"
}
scaling() {
run pillars-d2-up --sweep pillars=1,2,4,8,16
run depth-p1 --pillars 1 --sweep proposal-depth=1,2,4,8,16
run depth-p4 --pillars 4 --sweep proposal-depth=16,8,4,2,1
run depth-p16 --pillars 16 --sweep proposal-depth=1,2,4,8,16
run pillars-d8-down --proposal-depth 8 --sweep pillars=16,8,4,2,1
run pillars-d2-down --sweep pillars=16,8,4,2,1
threads threads-p1-d2 --pillars 1
threads threads-p4-d2 --pillars 4
threads threads-p1-d8 --pillars 1 --proposal-depth 8
run pillars-d8-up --proposal-depth 8 --sweep pillars=1,2,4,8,16
}
bound() {
  local i=0
  for t in 2 4 8 8 4 2; do
    i=$((i + 1))
    run "client-threads-$i-$t" --pillars 1 --client-threads $t
  done
  run batch-p1 --pillars 1 --client-threads 8 --sweep batch=64,256,1024
  run in-flight-p1 --pillars 1 --client-threads 8 --sweep in-flight=16,32,64
  run delay0-p1 --pillars 1 --client-threads 8 --batch-delay-ms 0
  run delay1-p1 --pillars 1 --client-threads 8 --batch-delay-ms 1
  MODE=pbft run pbft --pillars 1 --client-threads 8
  LOAD="--clients 128 --in-flight 8" run many-clients --client-threads 8 --sweep pillars=1,16
  threads threads-p16-d1 --pillars 16 --proposal-depth 1 --client-threads 8
}
$WHAT
# One CSV, one plot, no per-run folders (the device tool returns 8 files).
first=1
for d in "$OUT"/*/; do
  name=$(basename "$d")
  [ -f "$d/results.csv" ] || continue
  if [ $first = 1 ]; then sed -n '1s/^/sweep,/p' "$d/results.csv" > "$OUT/all.csv"; first=0; fi
  sed -n "2,\$s/^/$name,/p" "$d/results.csv" >> "$OUT/all.csv"
done
[ "$WHAT" = scaling ] && cp "$OUT/pillars-d2-up/plot.png" "$OUT/pillars.png" 2>/dev/null
rm -rf "$OUT"/*/
echo "== done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
