#!/usr/bin/env bash
# Issue 38's measurements in one device call each, on the GPU machine through scripts/gpu-run.sh's
# environment (node from gpu-pack/, dist/ built): every figure a same-call ratio.
#   bench/gpu-round.sh replay    the default allocator's candidates (adaptive) beside CUDA's pool (async) on
#                                every trace in test/fixtures/traces/, stacks alternated: --repeat 4 (first pass,
#                                passes 2-4, peak reserved over peak live, joins, growth calls), 200 warm passes
#                                on the multi-stream traces, and --headroom 3% on every trace
#   bench/gpu-round.sh builds BASE  bench/compare-builds.sh BASE 2, then the spill bench under each build
#   bench/gpu-round.sh objects   the object pairs (bench/object-pair.ts, wall clock) beside torch.empty,
#                                cupy.empty and cuda.core's Buffer (bench/peers/object_empty.py)
#   bench/gpu-round.sh reduce    vram bench --only kernels beside bench/peers/reductions.py (CuPy's
#                                reductions and the device-to-device copy ceiling)
# Output goes to stdout and, when $OUT is set, to $OUT/<phase>.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
phase=${1:?usage: bench/gpu-round.sh replay|builds BASE|objects|reduce}
shift
log() { printf '== %s\n' "$*"; }
out() { if [ -n "${OUT:-}" ]; then tee -a "$OUT/$phase.txt"; else cat; fi; }
case "$phase" in
  replay)
    traces=(test/fixtures/traces/*.csv)
    for t in "${traces[@]}"; do
      for stack in async adaptive; do
        log "$t $stack --repeat 4"
        node bin/vram.js replay "$t" --resource "$stack" --repeat 4 --json > /tmp/replay.json || true
        if [ -n "${OUT:-}" ]; then (tr -d '\n' < /tmp/replay.json; echo) >> "$OUT/replay.jsonl"; fi
        node scripts/stream-figures.mjs < /tmp/replay.json 2>&1 || true
      done
    done | out
    for t in test/fixtures/traces/multi_stream.csv test/fixtures/traces/*_4s_*.csv; do
      for stack in async adaptive; do
        log "$t $stack --repeat 200"
        node bin/vram.js replay "$t" --resource "$stack" --repeat 200 2>&1 | tail -n 12 || true
      done
    done | out
    for t in "${traces[@]}"; do
      log "$t --headroom 3%"
      node bin/vram.js replay "$t" --resource async,adaptive --headroom 3 --repeat 4 2>&1 | tail -n 14 || true
    done | out
    ;;
  builds)
    base=${1:?usage: bench/gpu-round.sh builds BASE}
    bench/compare-builds.sh "$base" 2 2>&1 | out
    for build in "$base" "$ROOT" "$base" "$ROOT"; do
      log "spill bench: $build"
      (cd "$build" && node dist/bench/spill.js --rounds 3) 2>&1 | tail -n 30 | out
    done
    ;;
  objects)
    node dist/bench/object-pair.js --clock wall --sizes 256,1M,64M --rounds 15 --pairs 2000 2>&1 | out
    node dist/bench/object-pair.js --clock wall --sizes 256,1M,64M --rounds 15 --pairs 2000 --pool 2>&1 | out
    python3 bench/peers/object_empty.py 2>&1 | out
    ;;
  reduce)
    for round in 1 2; do
      log "round $round: vram"
      node bin/vram.js bench --only kernels 2>&1 | tail -n 12 | out
      log "round $round: cupy"
      python3 bench/peers/reductions.py 2>&1 | out
    done
    ;;
  *) echo "gpu-round.sh: unknown phase $phase" >&2; exit 2 ;;
esac
