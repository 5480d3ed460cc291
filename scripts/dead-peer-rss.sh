#!/usr/bin/env bash
# Resident memory of the surviving replicas while one is dead (BENCHMARKS.md,
# 2026-11-27 "a dead peer's queue"): a local cop cluster on ports 27300..,
# a closed-loop bench, replica KILL SIGKILLed 4 s in, RSS 6 s and 16 s later.
#
#   scripts/dead-peer-rss.sh BIN PILLARS KILL [bench args]
set -uo pipefail
B=${1:?usage: dead-peer-rss.sh BIN PILLARS KILL [bench args]}; P=${2:?}; K=${3:?}; shift 3
D=$(mktemp -d /tmp/dead-peer-rss.XXXX)
"$B" keygen --out "$D" --n 4 --mode cop --pillars "$P" --service null --base-port 27300 --clients 130 --fsync off > /dev/null
pids=(); for i in 0 1 2 3; do "$B" replica --config "$D/replica-$i.toml" > "$D/r$i.log" 2>&1 & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
sleep 2
"$B" bench --target "$D" --service null --request-bytes 512 --warmup 1 --duration 22 --clients 32 --in-flight 32 --out "$D/b" "$@" > "$D/bench.log" 2>&1 &
bench=$!
sleep 4; kill -9 "${pids[$K]}"
for t in 6 10; do
  sleep $t
  echo -n "t+$t s after the kill:"
  for i in 0 1 2 3; do [ "$i" = "$K" ] || echo -n " r$i $(awk '/VmRSS/{print int($2/1024)}' "/proc/${pids[$i]}/status") MiB"; done; echo
done
wait $bench; grep -E "^run" "$D/bench.log" | cut -c1-100
curl -s localhost:27391/metrics | grep -E '^chorus_frames_dropped_total\{reason="peer-link-queue' || true
