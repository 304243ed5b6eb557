/**
 * The compile cache on disk: one file per compiled module, named by the SHA-256 of everything
 * that decides the compiler's output (source, options, headers, name expressions, architecture,
 * NVRTC version, driver version), so a second run of a program, or a second process, loads the
 * image instead of compiling again (NVRTC takes tens to hundreds of milliseconds per module).
 *
 * Entries are written to a temporary file in the same folder and renamed into place, so a reader
 * in another process sees a whole entry or none. An entry that does not parse, or whose image
 * does not match its recorded hash (a truncated or corrupted file), is treated as absent: the
 * source is compiled again and the entry rewritten. A cache that cannot be written (a read-only
 * folder) costs the speed-up, never the compile.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { absolutePath, variableReader, type EnvironmentValues } from '../util/environment.js';

/** `VRAM_CACHE_DIR`: the cache folder (kernels go in its `kernels/`), an absolute path. */
export const CACHE_DIR_VARIABLE = variableReader('VRAM_CACHE_DIR', absolutePath);

/** Everything the compiled image depends on. */
export interface CacheKeyParts {
  readonly source: string;
  readonly options: readonly string[];
  readonly headers: Readonly<Record<string, string>>;
  readonly nameExpressions: readonly string[];
  /** The target architecture option as passed to NVRTC (`--gpu-architecture=sm_90`). */
  readonly arch: string;
  readonly nvrtcVersion: readonly [number, number];
  readonly driverVersion: number;
}

/** A cached compile: the image and what the caller needs to use it. */
export interface CachedImage {
  readonly kind: 'ptx' | 'cubin';
  readonly image: Uint8Array;
  readonly loweredNames: Readonly<Record<string, string>>;
}

/** The entry format; bump when it changes, so old entries read as absent. */
const FORMAT = 1;

/**
 * The cache folder: `VRAM_CACHE_DIR`, else `$XDG_CACHE_HOME/vram`, else `~/.cache/vram`; kernels
 * go in its `kernels/` subfolder.
 *
 * @param env The environment to read (default `process.env`).
 * @returns The folder for compiled kernels (not created here).
 * @throws {RangeError} When `VRAM_CACHE_DIR` is not an absolute path.
 * @example
 * ```ts
 * kernelCacheDirectory({ VRAM_CACHE_DIR: '/tmp/vram' }); // '/tmp/vram/kernels'
 * ```
 */
export function kernelCacheDirectory(env: EnvironmentValues = process.env): string {
  const explicit = CACHE_DIR_VARIABLE.read(env);
  if (explicit !== undefined) return join(explicit, 'kernels');
  // The XDG base directory spec: a relative XDG_CACHE_HOME is invalid and is ignored.
  const xdg = env.XDG_CACHE_HOME;
  const base = xdg !== undefined && isAbsolute(xdg) ? xdg : join(homedir(), '.cache');
  return join(base, 'vram', 'kernels');
}

/**
 * The cache key: SHA-256 over the parts, each length-prefixed (so no two different inputs can
 * concatenate to the same bytes), headers in name order.
 *
 * @param parts What the compile depends on.
 * @returns 64 hex digits.
 * @example
 * ```ts
 * const key = cacheKey({ source, options: [], headers: {}, nameExpressions: [], arch: '--gpu-architecture=sm_90',
 *   nvrtcVersion: [13, 0], driverVersion: 13000 });
 * ```
 */
export function cacheKey(parts: CacheKeyParts): string {
  const hash = createHash('sha256');
  const add = (text: string): void => {
    const bytes = Buffer.from(text, 'utf8');
    hash.update(`${bytes.length}:`);
    hash.update(bytes);
  };
  add(`vram-kernel-cache/${FORMAT}`);
  add(parts.source);
  add(String(parts.options.length));
  for (const option of parts.options) add(option);
  const names = Object.keys(parts.headers).sort();
  add(String(names.length));
  for (const name of names) {
    add(name);
    add(parts.headers[name]!);
  }
  add(String(parts.nameExpressions.length));
  for (const expression of parts.nameExpressions) add(expression);
  add(parts.arch);
  add(parts.nvrtcVersion.join('.'));
  add(String(parts.driverVersion));
  return hash.digest('hex');
}

/**
 * Reads an entry.
 *
 * @param dir The cache folder.
 * @param key The entry's key.
 * @returns The cached image, or undefined when absent, unreadable or corrupt.
 * @example
 * ```ts
 * const hit = readCachedImage(kernelCacheDirectory(), key);
 * ```
 */
export function readCachedImage(dir: string, key: string): CachedImage | undefined {
  let text: string;
  try {
    text = readFileSync(join(dir, `${key}.json`), 'utf8');
  } catch {
    return undefined;
  }
  try {
    const entry = JSON.parse(text) as unknown;
    if (entry === null || typeof entry !== 'object') return undefined;
    const e = entry as Record<string, unknown>;
    if (e.format !== FORMAT || e.key !== key || (e.kind !== 'ptx' && e.kind !== 'cubin') || typeof e.image !== 'string' || typeof e.sha256 !== 'string') {
      return undefined;
    }
    const image = new Uint8Array(Buffer.from(e.image, 'base64'));
    if (createHash('sha256').update(image).digest('hex') !== e.sha256) return undefined;
    const lowered = e.loweredNames;
    if (lowered === null || typeof lowered !== 'object') return undefined;
    const loweredNames: Record<string, string> = {};
    for (const [name, value] of Object.entries(lowered)) {
      if (typeof value !== 'string') return undefined;
      loweredNames[name] = value;
    }
    return { kind: e.kind, image, loweredNames };
  } catch {
    return undefined;
  }
}

/**
 * Writes an entry atomically (a temporary file renamed into place). Failures are swallowed: the
 * cache is an optimisation.
 *
 * @param dir The cache folder (created when missing).
 * @param key The entry's key.
 * @param entry What to store.
 * @returns True when the entry was written.
 * @example
 * ```ts
 * writeCachedImage(kernelCacheDirectory(), key, { kind: 'cubin', image, loweredNames: {} });
 * ```
 */
export function writeCachedImage(dir: string, key: string, entry: CachedImage): boolean {
  const file = join(dir, `${key}.json`);
  const temporary = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    mkdirSync(dir, { recursive: true });
    const body = JSON.stringify({
      format: FORMAT, key, kind: entry.kind,
      sha256: createHash('sha256').update(entry.image).digest('hex'),
      loweredNames: entry.loweredNames,
      image: Buffer.from(entry.image.buffer, entry.image.byteOffset, entry.image.byteLength).toString('base64'),
    });
    writeFileSync(temporary, body, { mode: 0o644 });
    renameSync(temporary, file);
    return true;
  } catch {
    try {
      rmSync(temporary, { force: true });
    } catch {
      // Nothing more to do: the temporary name is unique, and no reader ever opens it.
    }
    return false;
  }
}
