#!/usr/bin/env bash
# The GPU suite file by file, each under a time limit, so one file that never exits cannot stop the rest
# (npm run test:gpu runs them in one go). Run there through gpu-run.sh:
#   scripts/gpu-run.sh exec scripts/gpu-test-files.sh [LIMIT_S] [BUDGET_S] [FILE ...]
# FILE defaults to every built test file; name some to run those (a later call continues where one stopped).
limit=${1:-40}; budget=${2:-400}; start=$(date +%s)
shift 2 2>/dev/null || shift $#
[ $# -gt 0 ] || set -- dist/test/*/*.test.js
export VRAM_BACKEND=cuda VRAM_TEST_GPU=1
for f in "$@"; do
  now=$(date +%s); [ $((now - start)) -ge "$budget" ] && { echo "BUDGET $f and after not run"; break; }
  timeout "$limit" node --test --test-concurrency=1 "$f" > /tmp/one.txt 2>&1; rc=$?
  p=$(grep -E '^# pass' /tmp/one.txt | awk '{print $3}'); fl=$(grep -E '^# fail' /tmp/one.txt | awk '{print $3}'); sk=$(grep -E '^# skipped' /tmp/one.txt | awk '{print $3}')
  echo "$(basename $f) rc=$rc pass=${p:-?} fail=${fl:-?} skip=${sk:-?} t=$(( $(date +%s) - now ))s"
  if [ "$rc" != 0 ]; then grep -E '^not ok|^    not ok|error:' /tmp/one.txt | head -6 | cut -c1-300; cp /tmp/one.txt "$OUT/fail-$(basename $f .js).txt" 2>/dev/null; fi
done
