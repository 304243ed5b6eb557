#!/usr/bin/env bash
# Times two builds of vram in one call, rounds alternated, so a ratio between them means something:
# the pool hit pair (dist/bench/pool-hit.js) and the staged copies of pageable JavaScript memory
# (`vram bench --only transfers`). BASE is a folder holding another build (its dist/ and bin/,
# e.g. made with `git archive <commit> | tar -x -C baseline && (cd baseline && npx tsc -p .)`);
# node_modules is found by walking up, so put it inside this checkout.
# usage: bench/compare-builds.sh BASE [ROUNDS]   (prints each run under a "== <build> round N" line)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=$(cd "${1:?usage: bench/compare-builds.sh BASE [ROUNDS]}" && pwd)
ROUNDS=${2:-2}
# The hit pair runs on one core of its own where taskset exists: it measures tens of nanoseconds,
# which a move between cores or a neighbour's burst would swamp. The transfers use copy threads, so
# they keep every core.
pin=()
command -v taskset >/dev/null && pin=(taskset -c "${PIN_CORE:-2}")
[ -f "$BASE/dist/bench/pool-hit.js" ] || { echo "compare-builds.sh: no $BASE/dist/bench/pool-hit.js: build BASE first" >&2; exit 1; }
[ -f "$ROOT/dist/bench/pool-hit.js" ] || { echo "compare-builds.sh: no dist/bench/pool-hit.js here: npx tsc -p . first" >&2; exit 1; }
for round in $(seq 1 "$ROUNDS"); do
  for build in "$BASE" "$ROOT"; do
    name=$([ "$build" = "$ROOT" ] && echo this || echo base)
    echo "== $name round $round: pool hit pair"
    (cd "$build" && "${pin[@]}" node dist/bench/pool-hit.js --passes 2)
    echo "== $name round $round: staged transfers"
    (cd "$build" && node bin/vram.js bench --only transfers --sizes 16M,256M)
  done
done
