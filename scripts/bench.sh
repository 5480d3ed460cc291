#!/usr/bin/env bash
# Every benchmark quoted in BENCHMARKS.md, one `chorus bench` sweep each.
# Results (JSON, CSV, PNG per sweep) go to $OUT (default bench-results/suite).
# Takes ~10 minutes; not part of the test suite. Usage: scripts/bench.sh [name...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p chorus-cli
C=./target/release/chorus
OUT=${OUT:-bench-results/suite}
D=${DURATION:-5}
W=${WARMUP:-1}
run() { # name, flags...
  local name=$1; shift
  if [ ${#ONLY[@]} -gt 0 ] && [[ ! " ${ONLY[*]} " == *" $name "* ]]; then return; fi
  echo "=== $name: chorus bench $*"
  $C bench --duration "$D" --warmup "$W" --out "$OUT/$name" --label "$name" "$@" 2>&1 | grep -v '^ *[0-9]*s ' || true
}
ONLY=("$@")
run modes-null      --service null --sweep mode=pbft,cop
run modes-kv        --service kv --workload u --value-bytes 128 --sweep mode=pbft,cop
run fig4-null       --service null --sweep executor=sequential,parallel,sequential,parallel
run fig5b-parallel  --service sleep --sleep-us 1000 --executor parallel --workers 64 --sweep buckets=1,2,4,8,16,32,64
run fig5b-seq       --service sleep --sleep-us 1000 --executor sequential --sweep buckets=1,64
run ycsb-a-uniform  --service kv --workload a --distribution uniform --sweep executor=sequential,parallel
run ycsb-a-zipfian  --service kv --workload a --distribution zipfian --sweep executor=sequential,parallel
run ycsb-b-uniform  --service kv --workload b --distribution uniform --sweep executor=sequential,parallel
run ycsb-b-zipfian  --service kv --workload b --distribution zipfian --sweep executor=sequential,parallel
run pillars-0b      --service null --mode cop --request-bytes 0 --sweep pillars=1,2
run pillars-128b    --service null --mode cop --request-bytes 128 --sweep pillars=1,2
run pillars-1024b   --service null --mode cop --request-bytes 1024 --sweep pillars=1,2
run speed-closed    --service null --mode cop --request-bytes 512 --clients 16 --sweep in-flight=8,16,32
run speed-closed-kv --service kv --workload u --value-bytes 480 --mode cop --clients 16 --sweep in-flight=8,16,32
run speed-open      --service null --mode cop --request-bytes 512 --clients 16 --sweep rate=2000,5000,10000,25000,50000
