#!/usr/bin/env bash
# Runs vram's bench and its references side by side, in one go, on the GPU machine: builds the CUDA C
# programs (bench/c) with nvcc, runs them, runs the Python peers (CuPy, PyTorch), runs
# `vram bench`, and prints one comparison table (bench/peers/compare_table.py); then the peers'
# fragmentation on the replay traces (bench/peers/replay_peers.py).
# Everything is written under $OUT/compare (or bench/build/compare when OUT is unset).
# usage: bench/compare.sh [extra vram bench options, e.g. --quick]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DIR=${OUT:+$OUT/compare}
DIR=${DIR:-$ROOT/bench/build/compare}
mkdir -p "$DIR"
log() { printf '== %s\n' "$*" >&2; }

command -v node >/dev/null || { echo "compare.sh: node not found (run through scripts/gpu-run.sh compare)" >&2; exit 1; }
[ -f dist/src/cli/main.js ] || { echo "compare.sh: dist/ is missing: build first (npx tsc -p .)" >&2; exit 1; }

# A failing reference is reported and the rest still run: the table shows what is missing.
status=0
built=0
log "building the CUDA C references (bench/c)"
if ! command -v nvcc >/dev/null; then
  echo "compare.sh: nvcc not found on PATH; skipping the CUDA C references" >&2
  status=1
elif make -s -C bench/c OUT="$ROOT/bench/build" >"$DIR/build.log" 2>&1; then
  built=1
else
  echo "compare.sh: building bench/c failed; skipping the CUDA C references:" >&2
  cat "$DIR/build.log" >&2
  status=1
fi
run() { # run <output file> <command...>
  local out=$1; shift
  log "$*"
  if ! "$@" >"$out" 2>"$out.err"; then
    echo "compare.sh: '$*' failed; see $out.err" >&2
    cat "$out.err" >&2 || true
    status=1
  fi
  [ -s "$out.err" ] || rm -f "$out.err"
}

# Rounds (3, or COMPARE_ROUNDS), each running every program once (references first, then vram), so neither side gets
# only the cold CPU; the table takes each program's best round.
ROUNDS=${COMPARE_ROUNDS:-3}
rm -f "$DIR"/*.jsonl "$DIR"/vram.*.json "$DIR/vram.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS"
  if [ "$built" = 1 ]; then
    run "$DIR/round.out" bench/build/pinned_copy && cat "$DIR/round.out" >> "$DIR/pinned_copy.jsonl"
    run "$DIR/round.out" bench/build/alloc_async && cat "$DIR/round.out" >> "$DIR/alloc_async.jsonl"
  fi
  if command -v python3 >/dev/null; then
    run "$DIR/round.out" python3 bench/peers/cupy_pool.py && cat "$DIR/round.out" >> "$DIR/peers.jsonl"
  fi
  run "$DIR/vram.$round.json" node bin/vram.js bench --json --only transfers,alloc,allocators "$@"
done
rm -f "$DIR/round.out"
# Few files come back from the GPU machine: vram's rounds go into one file, a JSON report a line.
python3 -c 'import json, sys; [print(json.dumps(json.load(open(p)))) for p in sys.argv[1:]]' \
  "$DIR"/vram.*.json > "$DIR/vram.jsonl" 2>/dev/null && rm -f "$DIR"/vram.*.json || rm -f "$DIR/vram.jsonl"
[ -s "$DIR/build.log" ] || rm -f "$DIR/build.log"
node bin/vram.js info > "$DIR/info.txt" 2>&1 || true

python3 bench/peers/compare_table.py "$DIR" | tee "$DIR/comparison.txt"

# Fragmentation of the peers on the real traces (the reference for `vram replay`'s overhead figure).
if compgen -G 'test/fixtures/traces/*.csv' >/dev/null; then
  log "python3 bench/peers/replay_peers.py"
  echo
  python3 bench/peers/replay_peers.py > "$DIR/replay_peers.txt" 2>&1 || status=1
  sed -n '/^trace /,$p' "$DIR/replay_peers.txt"
  # vram's own stacks on the same traces, in the same call: pool (ours) against async (the driver's pool).
  for trace in test/fixtures/traces/*.csv; do
    log "node bin/vram.js replay $trace -r pool -r async -r cuda"
    node bin/vram.js replay "$trace" -r pool -r async -r cuda | tee -a "$DIR/replay_vram.txt" || status=1
  done
fi
exit $status
