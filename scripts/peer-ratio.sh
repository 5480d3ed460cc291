#!/usr/bin/env bash
# Chorus beside Narwhal+Tusk on this machine, in alternating rounds (issue 13
# item 4). Narwhal's checkout and build stay outside this repo
# (../shared/tools/peers/README.md: `narwhal.sh DIR setup`, then `build`).
#
#   scripts/peer-ratio.sh NARWHAL_DIR [ROUNDS] [SECS]
#
# Each round runs Narwhal (4 primaries + 4 workers + 4 clients, 512 B
# transactions, offered NARWHAL_RATE tx/s, default 50 000) and then `chorus
# bench` (n = 4, cop, 1 pillar, null service, 512 B requests with replies,
# closed loop, CHORUS_ARGS), each for SECS seconds. CPU per operation is the
# machine's busy time (/proc/stat, all processes) over a steady window in the
# middle of each run, divided by the operations the run's throughput implies
# for that window. Loopback only.
set -euo pipefail
NARWHAL=${1:?usage: peer-ratio.sh NARWHAL_DIR [ROUNDS] [SECS]}
ROUNDS=${2:-3}
SECS=${3:-20}
RATE=${NARWHAL_RATE:-50000}
CHORUS_ARGS=${CHORUS_ARGS:---clients 32 --in-flight 32}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CHORUS_BIN:-$ROOT/target/release/chorus}
PEERS_SH=${PEERS_SH:-$ROOT/../shared/tools/peers/narwhal.sh}
OUT=${OUT:-$ROOT/target/peer-ratio}
mkdir -p "$OUT"

# Busy and total jiffies of all CPUs.
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
# Busy CPU seconds over [FROM, FROM+LEN) seconds from now, printed when done.
window() {
  sleep "$1"
  local a b
  a=$(busy); sleep "$2"; b=$(busy)
  echo "$a $b" | awk -v hz="$(getconf CLK_TCK)" '{print ($3-$1)/hz}'
}

W_FROM=$((SECS / 3)); W_LEN=$((SECS / 2))
printf '%s\n' "round system ops/s p50_ms cpu_s_in_window us_cpu_per_op" | tee "$OUT/summary.txt"
for r in $(seq 1 "$ROUNDS"); do
  # Narwhal: the clients start with the nodes; the window starts after
  # W_FROM + 2 s of its SECS.
  window $((W_FROM + 2)) "$W_LEN" > "$OUT/nw-cpu-$r" &
  "$PEERS_SH" "$NARWHAL" bench "$RATE" "$SECS" > "$OUT/narwhal-$r.txt" 2>&1 || true
  wait
  tps=$(awk '/^end-to-end TPS/{gsub(",","",$3); print $3}' "$OUT/narwhal-$r.txt")
  p50=$(awk '/^end-to-end TPS/{for(i=1;i<=NF;i++) if($i=="p50") print $(i+1)}' "$OUT/narwhal-$r.txt")
  cpu=$(cat "$OUT/nw-cpu-$r")
  echo "$r narwhal ${tps:-0} ${p50:-nan} $cpu $(awk -v c="$cpu" -v t="${tps:-0}" -v l="$W_LEN" 'BEGIN{print (t>0)? c*1e6/(t*l) : "nan"}')" | tee -a "$OUT/summary.txt"

  # Chorus: keygen and start take ~3 s, then 2 s of warm-up.
  window $((W_FROM + 5)) "$W_LEN" > "$OUT/ch-cpu-$r" &
  # shellcheck disable=SC2086
  "$BIN" bench --mode cop --pillars 1 --service null --request-bytes 512 \
    --duration "$SECS" --warmup 2 $CHORUS_ARGS --out "$OUT/chorus-$r" > "$OUT/chorus-$r.txt" 2>&1 || true
  wait
  ops=$(awk '/^run/{print $2}' "$OUT/chorus-$r.txt")
  p50=$(awk '/^run/{print $5}' "$OUT/chorus-$r.txt")
  cpu=$(cat "$OUT/ch-cpu-$r")
  echo "$r chorus ${ops:-0} ${p50:-nan} $cpu $(awk -v c="$cpu" -v t="${ops:-0}" -v l="$W_LEN" 'BEGIN{print (t>0)? c*1e6/(t*l) : "nan"}')" | tee -a "$OUT/summary.txt"
done
