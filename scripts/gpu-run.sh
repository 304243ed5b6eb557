#!/usr/bin/env bash
# Runs vram on the GPU machine (no Node.js, no network) from the working tree plus gpu-pack/
# (made by scripts/pack-gpu.sh): unpacks node and npm into /tmp/vram-node and node_modules into the
# repository root (once per pack), puts the driver's libraries on LD_LIBRARY_PATH, then:
#   test [args]      npm run test:gpu (the whole suite on the real GPU, plus GPU-only cases)
#   sanitize [args]  npm run test:sanitizer (the same suite under compute-sanitizer memcheck)
#   bench [args]     node bin/vram.js bench [args]
#   compare [args]   bench/compare.sh: CUDA C and Python references vs vram bench, one table
#   info [args]      node bin/vram.js info [args]
#   replay [args]    node bin/vram.js replay [args]
#   exec cmd [args]  any command with node, npm and the environment set up
# When $OUT is set, each command's output is also saved under it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PACK=${VRAM_GPU_PACK:-$ROOT/gpu-pack}
NODE_HOME=${VRAM_NODE_HOME:-/tmp/vram-node}
die() { echo "gpu-run.sh: $*" >&2; exit 1; }
log() { echo "gpu-run.sh: $*" >&2; }
usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
command=$1
shift

[ -f "$PACK/MANIFEST" ] || die "no $PACK/MANIFEST: run scripts/pack-gpu.sh on the build machine and carry gpu-pack/"
stamp=$(sed -n 's/^stamp=//p' "$PACK/MANIFEST")

# node and npm: into $NODE_HOME, the layout npm expects (bin/ and lib/node_modules/npm).
if [ "$(cat "$NODE_HOME/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
  log "unpacking node and npm into $NODE_HOME"
  rm -rf "$NODE_HOME"
  mkdir -p "$NODE_HOME/bin" "$NODE_HOME/lib/node_modules"
  gzip -dc "$PACK/node.gz" > "$NODE_HOME/bin/node"
  chmod +x "$NODE_HOME/bin/node"
  tar -xzf "$PACK/npm.tar.gz" -C "$NODE_HOME/lib/node_modules"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$NODE_HOME/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$NODE_HOME/bin/npx"
  echo "$stamp" > "$NODE_HOME/.stamp"
fi

# node_modules: into the repository root, replaced when the pack changes.
if [ "$(cat node_modules/.vram-pack-stamp 2>/dev/null || true)" != "$stamp" ]; then
  log "unpacking node_modules into $ROOT"
  rm -rf node_modules
  tar -xzf "$PACK/node_modules.tar.gz" -C "$ROOT"
  echo "$stamp" > node_modules/.vram-pack-stamp
fi

export PATH="$NODE_HOME/bin:$PATH"
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Offline: npm must not try the registry, nor print notices that wait on the network.
export npm_config_offline=true npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
node --version >/dev/null || die "the packed node does not run here (glibc/libstdc++ too old?)"

# Builds dist/ with the packed TypeScript; type errors are reported but what was emitted still runs.
build() {
  log "building (tsc -p .)"
  node node_modules/typescript/bin/tsc -p . || log "tsc reported errors (continuing with what it emitted)"
  [ -f dist/src/cli/main.js ] || die "the build produced no dist/src/cli/main.js"
}

# Runs a command, copying its output to $OUT/<name>.txt when $OUT is set; keeps its exit status.
record() {
  local name=$1; shift
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    "$@" 2>&1 | tee "$OUT/$name.txt"
    return "${PIPESTATUS[0]}"
  fi
  "$@"
}

case "$command" in
  test) record test npm run test:gpu -- "$@" ;;
  sanitize) record sanitize npm run test:sanitizer -- "$@" ;;
  bench) build; record bench node bin/vram.js bench "$@" ;;
  compare) build; bench/compare.sh "$@" ;;
  info) build; record info node bin/vram.js info "$@" ;;
  replay) build; record replay node bin/vram.js replay "$@" ;;
  exec) [ $# -ge 1 ] || usage; "$@" ;;
  -h|--help|help) usage ;;
  *) echo "gpu-run.sh: unknown command '$command'" >&2; usage ;;
esac
