#!/usr/bin/env bash
# Slots, requests and replica CPU over one bench against a local cluster
# (BENCHMARKS.md, 2026-11-27 "replica CPU per slot"): the delivered slots and
# executed requests from replica 0's /metrics, the 4 replicas' CPU from /proc,
# the load generator's CPU from /usr/bin/time (it includes its start and warm-up).
#
#   [FSYNC=off|batch|always] [PARAMS_SED=...] scripts/slots-per-request.sh BIN MODE PILLARS [bench args, e.g. --rate 5000 --duration 5]
set -uo pipefail
B=${1:?usage: slots-per-request.sh BIN MODE PILLARS [bench args]}; M=${2:?}; P=${3:?}; shift 3
D=$(mktemp -d /tmp/slots-per-request.XXXX)
"$B" keygen --out "$D" --n 4 --mode "$M" --pillars "$P" --service null --base-port 27300 --clients 130 --fsync "${FSYNC:-off}" > /dev/null
# PARAMS_SED: a sed script for cluster.toml's [params], e.g. 's/^prepare_auth = .*/prepare_auth = "mac"/'.
[ -n "${PARAMS_SED:-}" ] && sed -i "$PARAMS_SED" "$D/cluster.toml"
pids=(); for i in 0 1 2 3; do "$B" replica --config "$D/replica-$i.toml" > "$D/r$i.log" 2>&1 & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
sleep 2
ticks() { local s=0; for p in "${pids[@]}"; do s=$((s + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo $s; }
t0=$(ticks)
line=$(/usr/bin/time -o "$D/time" -f "%U %S" "$B" bench --target "$D" --service null --request-bytes 512 --warmup 1 --out "$D/b" "$@" 2>&1 | grep -E "^run" | cut -c1-90)
t1=$(ticks)
m=$(curl -s localhost:27391/metrics)
slots=$(echo "$m" | awk '/^chorus_delivered_batches_total/{print $2}')
reqs=$(echo "$m" | awk '/^chorus_executed_requests_total/{print $2}')
echo "$M P=$P $* | $line | slots $slots requests $reqs per-slot $(awk -v a="$reqs" -v b="$slots" 'BEGIN{printf "%.1f", a/b}') replica-CPU $(awk -v t=$((t1 - t0)) 'BEGIN{printf "%.2f", t / 100}') s client-CPU $(awk '{printf "%.2f", $1 + $2}' "$D/time") s | per request (incl. warm-up): replica $(awk -v t=$((t1 - t0)) -v r="$reqs" 'BEGIN{printf "%.1f", t * 1e4 / r / 4}') µs each, client $(awk -v r="$reqs" '{printf "%.1f", ($1 + $2) * 1e6 / r}' "$D/time") µs"
