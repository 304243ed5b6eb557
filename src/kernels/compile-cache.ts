/**
 * The compile cache on disk: one file per compiled module, named by the SHA-256 of everything
 * that decides the compiler's output (source, options, headers, name expressions, architecture,
 * NVRTC version, driver version), so a second run of a program, or a second process, loads the
 * image instead of compiling again (NVRTC takes tens to hundreds of milliseconds per module).
 *
 * Whoever can write the cache chooses the code the GPU runs, so the cache is the user's alone, as
 * ssh, pip and ccache treat theirs: the folders are created 0700 and entries 0600 (created with
 * that mode, never widened afterwards), and a cache folder (`VRAM_CACHE_DIR`, `~/.cache/vram`)
 * or its `kernels/` folder that is not owned by the user, or that group or others may write, is not
 * used: one warning per folder, then compiling without the cache. Folders are created one level at
 * a time, at most three (`~/.cache`, `vram`, `kernels`), never `mkdir -p`: a recursive creation
 * under a special file system (`/proc`) loops forever in Node, and one from an unset variable's
 * typo would scatter folders anywhere.
 *
 * What an entry's digest is for: it covers the key, the kind, the lowered names and the image, so
 * a truncated, corrupted or misplaced entry reads as absent (the source is compiled again and the
 * entry rewritten). It is no defence against tampering, and nothing stored beside the entries
 * could be: anyone who can write the folder can write a matching digest, or a keyed one with a key
 * kept there. The defence is the folder: only the user can write it, so a tampered entry in it is
 * the user's own doing, like a changed file in their own source tree. The key covers everything
 * the compile depends on (source, options, headers, name expressions, architecture, NVRTC and
 * driver versions), so an entry can only be taken for the compile that wrote it.
 *
 * Entries are written to a temporary file in the same folder and renamed into place, so a reader
 * in another process sees a whole entry or none. A cache that cannot be written (a read-only
 * folder) costs the speed-up, never the compile.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, type Stats } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
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

/** The entry format; bump when it changes, so old entries read as absent (2: the digest covers the whole entry). */
const FORMAT = 2;

/** The most folders one write creates, from the nearest that exists: `~/.cache`, `vram`, `kernels`. */
const MAX_CREATED_FOLDERS = 3;

/** Entries larger than this are not read (a CUBIN is megabytes; this is a file that is no entry). */
const MAX_ENTRY_BYTES = 256 * 1024 * 1024;

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

/** Folders and reasons already warned about: one warning per folder and reason, however many compiles meet it. */
const warnedFolders = new Set<string>();

function warnOnce(folder: string, why: string): void {
  const seen = `${folder}\0${why}`;
  if (warnedFolders.has(seen)) return;
  warnedFolders.add(seen);
  process.emitWarning(
    `vram does not use the kernel cache in ${folder}: ${why}; kernels are compiled without the cache. ` +
      'Set VRAM_CACHE_DIR to a folder only you can write (chmod 700), or fix this one.',
    { code: 'VRAM_CACHE_UNTRUSTED' },
  );
}

/** The error code of a failed file-system call, for messages. */
function codeOf(error: unknown): string {
  return error instanceof Error && 'code' in error && typeof error.code === 'string' ? error.code : String(error);
}

/** Why a folder must not hold the cache, or undefined when only the user can write it. */
function distrust(folder: string, stats: Stats): string | undefined {
  if (!stats.isDirectory()) return `${folder} is not a folder`;
  // Without POSIX owners and modes (Windows) the folder's ACLs decide; a user's profile is private.
  const uid = process.getuid?.();
  if (uid === undefined) return undefined;
  if (stats.uid !== uid) return `${folder} is owned by user ${stats.uid}, not by this user (${uid})`;
  if ((stats.mode & 0o022) !== 0) return `${folder} is writable by group or others (mode ${(stats.mode & 0o7777).toString(8).padStart(4, '0')})`;
  return undefined;
}

/**
 * Makes `dir` (a `kernels/` folder) ready for the cache, or says why it cannot be: creates what
 * is missing (when `create`), one level at a time with mode 0700, at most MAX_CREATED_FOLDERS, and
 * checks that `dir` and the cache folder above it are the user's alone.
 *
 * @returns 'ready', 'absent' (nothing to read, and `create` was false), or why not.
 */
function prepareFolder(dir: string, create: boolean): 'ready' | 'absent' | { refused: string } {
  const missing: string[] = [];
  for (let folder = dir; ; folder = dirname(folder)) {
    try {
      statSync(folder);
      break;
    } catch (error) {
      if (codeOf(error) !== 'ENOENT') return { refused: `${folder} cannot be read (${codeOf(error)})` };
    }
    if (!create) return 'absent';
    missing.push(folder);
    if (missing.length > MAX_CREATED_FOLDERS || dirname(folder) === folder) {
      return { refused: `${dirname(folder)} does not exist either (vram creates at most ${MAX_CREATED_FOLDERS} folders: a cache folder, vram, kernels)` };
    }
  }
  // The cache folder is checked before anything is created in it.
  const root = dirname(dir);
  for (const folder of missing.includes(root) ? [] : [root]) {
    const why = distrust(folder, statSync(folder));
    if (why !== undefined) return { refused: why };
  }
  for (const folder of missing.reverse()) {
    try {
      mkdirSync(folder, { mode: 0o700 });
    } catch (error) {
      // Another process creating it at the same moment is fine: the check below decides.
      if (codeOf(error) !== 'EEXIST') return { refused: `${folder} cannot be created (${codeOf(error)})` };
    }
  }
  try {
    const why = distrust(root, statSync(root)) ?? distrust(dir, statSync(dir));
    return why === undefined ? 'ready' : { refused: why };
  } catch (error) {
    return { refused: `${dir} cannot be read (${codeOf(error)})` };
  }
}

/** `prepareFolder`, warning once when the folder is refused; true when the cache may be used. */
function usableFolder(dir: string, create: boolean): boolean {
  const state = prepareFolder(dir, create);
  if (typeof state === 'object') warnOnce(dir, state.refused);
  return state === 'ready';
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
 * The digest an entry records: SHA-256 over its key, kind, lowered names (in name order) and
 * image, each length-prefixed, so damage to any of them, or an entry under another key's name,
 * reads as absent. (Corruption only: see the header on tampering.)
 */
function entryDigest(key: string, entry: CachedImage): string {
  const hash = createHash('sha256');
  const add = (bytes: Uint8Array | string): void => {
    const data = typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : bytes;
    hash.update(`${data.byteLength}:`);
    hash.update(data);
  };
  add(key);
  add(entry.kind);
  const names = Object.keys(entry.loweredNames).sort();
  add(String(names.length));
  for (const name of names) {
    add(name);
    add(entry.loweredNames[name]!);
  }
  add(entry.image);
  return hash.digest('hex');
}

/**
 * Reads an entry's text: a regular file of the user's that no one else may write, opened without
 * following a link and without blocking (a FIFO planted as an entry would hang a plain read).
 */
function readEntryText(file: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0));
  } catch {
    return undefined;
  }
  try {
    const stats = fstatSync(fd);
    const uid = process.getuid?.();
    if (!stats.isFile() || stats.size > MAX_ENTRY_BYTES) return undefined;
    if (uid !== undefined && (stats.uid !== uid || (stats.mode & 0o022) !== 0)) return undefined;
    return readFileSync(fd, 'utf8');
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

/**
 * Reads an entry. A cache folder that is not the user's alone is not read (one warning).
 *
 * @param dir The cache folder.
 * @param key The entry's key.
 * @returns The cached image, or undefined when absent, unreadable, corrupt or in a folder refused.
 * @example
 * ```ts
 * const hit = readCachedImage(kernelCacheDirectory(), key);
 * ```
 */
export function readCachedImage(dir: string, key: string): CachedImage | undefined {
  if (!usableFolder(dir, false)) return undefined;
  const text = readEntryText(join(dir, `${key}.json`));
  if (text === undefined) return undefined;
  try {
    const entry = JSON.parse(text) as unknown;
    if (entry === null || typeof entry !== 'object') return undefined;
    const e = entry as Record<string, unknown>;
    if (e.format !== FORMAT || e.key !== key || (e.kind !== 'ptx' && e.kind !== 'cubin') || typeof e.image !== 'string' || typeof e.sha256 !== 'string') {
      return undefined;
    }
    const lowered = e.loweredNames;
    if (lowered === null || typeof lowered !== 'object') return undefined;
    const loweredNames: Record<string, string> = {};
    for (const [name, value] of Object.entries(lowered)) {
      if (typeof value !== 'string') return undefined;
      loweredNames[name] = value;
    }
    const cached: CachedImage = { kind: e.kind, image: new Uint8Array(Buffer.from(e.image, 'base64')), loweredNames };
    return entryDigest(key, cached) === e.sha256 ? cached : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes an entry atomically (a temporary file created 0600, renamed into place). Failures are
 * swallowed: the cache is an optimisation. A folder that is not the user's alone is not written
 * (one warning).
 *
 * @param dir The cache folder (created 0700 when missing, at most three levels).
 * @param key The entry's key.
 * @param entry What to store.
 * @returns True when the entry was written.
 * @example
 * ```ts
 * writeCachedImage(kernelCacheDirectory(), key, { kind: 'cubin', image, loweredNames: {} });
 * ```
 */
export function writeCachedImage(dir: string, key: string, entry: CachedImage): boolean {
  if (!usableFolder(dir, true)) return false;
  const file = join(dir, `${key}.json`);
  const temporary = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    const body = JSON.stringify({
      format: FORMAT,
      key,
      kind: entry.kind,
      sha256: entryDigest(key, entry),
      loweredNames: entry.loweredNames,
      image: Buffer.from(entry.image.buffer, entry.image.byteOffset, entry.image.byteLength).toString('base64'),
    });
    // 'wx': a new file (never one planted under the temporary name), with its mode from the start.
    writeFileSync(temporary, body, { mode: 0o600, flag: 'wx' });
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
