#!/usr/bin/env bash
# Packs what the GPU machine lacks into gpu-pack/ (git-ignored), so the working tree plus that one
# folder is enough there (an offline x86-64 Linux box with the NVIDIA driver, nvcc and Python, but
# no Node.js and no network):
#   node.gz              this machine's node binary, gzip-compressed
#   npm.tar.gz           this machine's npm (so `npm run test:gpu` itself runs there)
#   node_modules.tar.gz  koffi (linux-x64 glibc build only) and the dev dependencies, so the
#                        GPU machine can rebuild with tsc
#   MANIFEST             versions, sizes and a stamp gpu-run.sh uses to unpack only once
# Then run there: scripts/gpu-run.sh <test|bench|compare|info|replay|exec> ...
# usage: scripts/pack-gpu.sh        (env: PACK_DIR to pack elsewhere, PACK_LIMIT_MB, default 55)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PACK=${PACK_DIR:-$ROOT/gpu-pack}
LIMIT_MB=${PACK_LIMIT_MB:-55}
die() { echo "pack-gpu.sh: $*" >&2; exit 1; }
log() { echo "pack-gpu.sh: $*" >&2; }

NODE_BIN=$(command -v node) || die "node is not on PATH"
NODE_BIN=$(readlink -f "$NODE_BIN")
[ "$(uname -m)" = x86_64 ] || die "this machine is $(uname -m); the GPU machine is x86-64, so its node must be too"
NPM_DIR=${NPM_DIR:-}
if [ -z "$NPM_DIR" ]; then
  npm_cli=$(readlink -f "$(command -v npm)" 2>/dev/null || true)
  NPM_DIR=$(dirname "$(dirname "${npm_cli:-/usr/lib/node_modules/npm/bin/npm-cli.js}")")
fi
[ -f "$NPM_DIR/bin/npm-cli.js" ] || die "npm not found at $NPM_DIR (set NPM_DIR to npm's package folder)"
[ -d node_modules/koffi ] || die "node_modules is missing: run 'npm ci' first"
[ -d node_modules/@koromix/koffi-linux-x64 ] || die "node_modules/@koromix/koffi-linux-x64 is missing: run 'npm ci' on linux-x64"
[ -d node_modules/typescript ] || die "node_modules/typescript is missing: run 'npm ci' (with dev dependencies)"

log "building (tsc -p .) to check the tree compiles"
npx --no-install tsc -p . || die "the TypeScript build failed; fix it before packing"

rm -rf "$PACK"
mkdir -p "$PACK"

log "node $("$NODE_BIN" --version) from $NODE_BIN"
gzip -6 -c "$NODE_BIN" > "$PACK/node.gz"

log "npm $(node "$NPM_DIR/bin/npm-cli.js" --version 2>/dev/null || echo '?') from $NPM_DIR"
tar -czf "$PACK/npm.tar.gz" -C "$(dirname "$NPM_DIR")" "$(basename "$NPM_DIR")"

# koffi's other prebuilt platforms (musl, docs) are of no use on a glibc x86-64 box, nor are the linter,
# the formatter and the API reference generator (CI's, never the GPU machine's), nor source maps.
log "node_modules (production koffi for linux-x64 + dev dependencies)"
tar -czf "$PACK/node_modules.tar.gz" \
  --exclude='node_modules/@koromix/koffi-linux-x64/musl_x64' \
  --exclude='node_modules/@koromix/koffi-linux-[!x]*' \
  --exclude='node_modules/@koromix/koffi-darwin-*' \
  --exclude='node_modules/@koromix/koffi-win32-*' \
  --exclude='node_modules/@koromix/koffi-freebsd-*' \
  --exclude='node_modules/@koromix/koffi-openbsd-*' \
  --exclude='node_modules/koffi/doc' \
  --exclude='node_modules/.cache' --exclude='*.map' \
  --exclude='node_modules/@oxlint' --exclude='node_modules/oxlint' \
  --exclude='node_modules/@oxfmt' --exclude='node_modules/oxfmt' \
  --exclude='node_modules/typedoc' --exclude='node_modules/@shikijs' --exclude='node_modules/@gerrit0' \
  node_modules


stamp=$(cat "$PACK/node.gz" "$PACK/npm.tar.gz" "$PACK/node_modules.tar.gz" | cksum | cut -d' ' -f1)
{
  echo "stamp=$stamp"
  echo "node=$("$NODE_BIN" --version)"
  echo "npm=$(node "$NPM_DIR/bin/npm-cli.js" --version 2>/dev/null || echo unknown)"
  echo "packed=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$PACK/MANIFEST"

total_kb=$(du -sk "$PACK" | cut -f1)
du -sh "$PACK"/* >&2
log "gpu-pack total: $((total_kb / 1024)) MiB (limit ${LIMIT_MB} MiB; the working tree travels too, 64 MiB in all)"
[ "$total_kb" -le $((LIMIT_MB * 1024)) ] || die "gpu-pack is over ${LIMIT_MB} MiB"
echo "$PACK"
