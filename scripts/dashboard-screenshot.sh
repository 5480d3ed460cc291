#!/usr/bin/env bash
# Screenshots of the live dashboard taken with headless Chromium while
# `chorus demo` runs (issue 14 item 3): one while the demo's victim replica
# is killed (it is highlighted as unreachable), one after it was restarted.
#   scripts/dashboard-screenshot.sh [OUT_DIR]     (default: docs)
# Needs `chromium` (Debian: apt-get install chromium) and a built `chorus`
# (CHORUS_BIN, default target/debug/chorus).
set -euo pipefail
BIN=${CHORUS_BIN:-target/debug/chorus}
OUT=${1:-docs}
PHASE=${PHASE_SECS:-15}
BROWSER=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$BROWSER" ] || { echo "no chromium found" >&2; exit 2; }
log=$(mktemp)
"$BIN" demo --phase-secs "$PHASE" >"$log" 2>&1 &
demo=$!
# SIGINT: the demo stops every replica it started.
trap 'kill -INT $demo 2>/dev/null || true; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 300); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$log" | head -1 || true)
  [ -n "$url" ] && break
  sleep 0.2
done
[ -n "$url" ] || { cat "$log" >&2; echo "the demo printed no dashboard URL" >&2; exit 1; }
echo "dashboard at $url"
shot() {
  "$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1500,1060 --virtual-time-budget=3000 --screenshot="$1" "$url" 2>/dev/null
  echo "wrote $1"
}
# Phases: healthy [0, P), one replica killed [P, 2P), restarted [2P, 3P).
sleep $((PHASE + PHASE / 2))
shot "$OUT/dashboard-replica-down.png"
sleep "$PHASE"
shot "$OUT/dashboard.png"
wait $demo || { cat "$log" >&2; exit 1; }
trap 'rm -f "$log"' EXIT
grep -E "caught up|same view|lost" "$log"
