/** Shared helpers for the suite, which runs on whichever backend VRAM_BACKEND selects. */
import assert from 'node:assert/strict';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { Backend } from '../src/backend/backend.js';
import { getBackend } from '../src/backend/select.js';
import { Device } from '../src/device.js';
import { emptyCache, setCurrentResource } from '../src/resource/current.js';
import type { MemoryResource } from '../src/resource/resource.js';
import { CudaResource } from '../src/resource/upstream/cuda-resource.js';
import { spillableResource } from '../src/buffer/spill/spill-manager.js';

/** True when the suite runs on a real GPU (`npm run test:gpu`). */
export const onGpu: boolean = getBackend().name === 'cuda';

/**
 * True under `npm run test:sanitizer` (VRAM_SANITIZER=1, set by that script: compute-sanitizer leaves
 * no mark of its own that a test can read).
 */
export const underSanitizer: boolean = process.env.VRAM_SANITIZER === '1';

/** Options for a test that needs a real GPU: skipped, with the reason, on the emulated backend. */
export const gpuOnly = { skip: onGpu ? false : 'needs a real GPU (npm run test:gpu)' } as const;

const MiB = 1024 * 1024;

/**
 * How far the device's used memory (total - free, as cuMemGetInfo reports it) may move across
 * code that returns everything it allocated. On the emulated backend the figure is vram's own
 * exact accounting: 0. On a GPU the driver keeps state of its own in device memory and moves it
 * in its 2 MiB pages on its own schedule (CUDA 13, H200: the first stream created takes a page
 * that its destroy does not give back; a failed cuMemAlloc larger than the device gives one
 * back), so a few pages of slack, on the cuda backend only. Tests that check memory went back
 * allocate several times this much, so memory not given back still fails them on a GPU.
 */
export const FREE_MEMORY_SLACK: number = onGpu ? 4 * 2 * MiB : 0;

/**
 * Device memory in use on `device` (device 0 by default): total - free, as the backend reports it,
 * once the current resources' caches are given back (`emptyCache`). The default resource is a
 * caching pool that keeps freed memory for reuse, as CuPy's and PyTorch's do; without this, a test
 * that checks memory went back to the driver would see that cache instead.
 */
export function deviceMemoryUsed(device: Device = Device.get(0)): number {
  emptyCache(device);
  const m = device.memInfo();
  return m.total - m.free;
}

/**
 * Asserts that the device's used memory is back where it was: exactly on the emulated backend,
 * within FREE_MEMORY_SLACK (the driver's own bookkeeping) on a GPU.
 */
export function assertMemoryReturned(before: number, after: number, message: string): void {
  const drift = after - before;
  if (onGpu && drift !== 0) console.log(`# ${message}: the driver's used memory moved by ${drift} bytes`);
  assert.ok(
    Math.abs(drift) <= FREE_MEMORY_SLACK,
    `${message}: used device memory moved by ${drift} bytes (from ${before} to ${after}; allowed ${FREE_MEMORY_SLACK})`,
  );
}

/**
 * A way to force garbage collection, if the runtime allows one (`--expose-gc`, or the flag set at
 * run time and `gc` taken from a new context); undefined when it does not. Tests of the
 * garbage-collection backstops skip without it.
 */
export const forceGc: (() => void) | undefined = ((): (() => void) | undefined => {
  const g = (globalThis as { gc?: () => void }).gc;
  if (typeof g === 'function') return g;
  try {
    v8.setFlagsFromString('--expose-gc');
    const fromContext = vm.runInNewContext('gc') as unknown;
    return typeof fromContext === 'function' ? (fromContext as () => void) : undefined;
  } catch {
    return undefined;
  }
})();

/** The skip option of a test that needs `forceGc`. */
export const needsGc = { skip: forceGc === undefined ? 'no way to force garbage collection here (run node with --expose-gc)' : false } as const;

/**
 * Runs `body` and returns the codes of the warnings vram emitted meanwhile, without printing them
 * (process.emitWarning is stubbed for the duration): a test that checks a warning leaves the
 * suite's output clean.
 */
export async function captureWarnings(body: () => void | Promise<void>): Promise<string[]> {
  const codes: string[] = [];
  const original = process.emitWarning;
  const capture = (_warning: string | Error, options?: string | { code?: string }, code?: string): void => {
    codes.push((typeof options === 'object' ? options.code : code) ?? '');
  };
  process.emitWarning = capture as typeof process.emitWarning;
  try {
    await body();
  } finally {
    process.emitWarning = original;
  }
  return codes;
}

/**
 * `n` bytes of seeded pseudo-random data (xorshift32 from `seed`), never all zeros: the same bytes
 * for the same seed, so a failing round trip can be replayed.
 */
export function randomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/**
 * Runs `body` with `mr` as device 0's current resource, then puts the previous one back and
 * destroys `mr`, then the resources of `below` (its upstreams, in order).
 */
export function withCurrent<T extends MemoryResource>(mr: T, body: (mr: T) => void, below: readonly MemoryResource[] = []): void {
  const previous = setCurrentResource(0, mr);
  try {
    body(mr);
  } finally {
    setCurrentResource(0, previous);
    mr.destroy();
    for (const r of below) r.destroy();
  }
}

/**
 * Runs `body` with only `room` bytes of device 0 left to vram (a small device on both backends):
 * the rest is held by driver allocations made first (a ballast), given back after. The free
 * memory beyond `room` is taken in whole 2 MiB pieces first, then what other allocations left
 * unaligned, so `room` is left exactly where the driver allocates in bytes (emulated). A real
 * driver needs free memory of its own beyond what it hands out (a stream, the page tables of a
 * new mapping), so on a GPU the ballast leaves `DRIVER_SLACK` more, and `VRAM_SPILL_LIMIT` keeps
 * spillable memory within `room` (a resource other than the spillable one sees the slack too).
 * The spillable resource's spare pages (kept from earlier tests' spills and frees) go back first:
 * held outside the room, they would be room the test did not ask for.
 */
export function withDeviceRoom(room: number, body: () => void): void {
  using _room = holdDeviceRoom(room);
  body();
}

/**
 * What `withDeviceRoom` does, as a Disposable: the device keeps `room` free for the program until
 * it is disposed (for an asynchronous body, or a whole test file's `before` and `after`).
 */
export function holdDeviceRoom(room: number): Disposable {
  const device = Device.get(0);
  spillableResource(device).releaseSpares();
  const ballast = new CudaResource(device);
  const held: Array<[number, number]> = [];
  const take = (bytes: number): void => {
    if (bytes > 0) held.push([ballast.allocate(bytes), bytes]);
  };
  const slack = onGpu ? DRIVER_SLACK : 0;
  const limit = process.env.VRAM_SPILL_LIMIT;
  const release = (): void => {
    if (limit === undefined) delete process.env.VRAM_SPILL_LIMIT;
    else process.env.VRAM_SPILL_LIMIT = limit;
    for (const [ptr, bytes] of held) ballast.deallocate(ptr, bytes);
    ballast.destroy();
  };
  try {
    take(Math.floor(Math.max(0, device.memInfo().free - room - slack) / (2 * MiB)) * 2 * MiB);
    take(Math.max(0, device.memInfo().free - room - slack));
    if (onGpu) {
      const { free, total } = device.memInfo();
      process.env.VRAM_SPILL_LIMIT = String(total - free + room);
    }
  } catch (error) {
    release();
    throw error;
  }
  return { [Symbol.dispose]: release };
}

/** Free memory a GPU's driver keeps for itself beyond what `withDeviceRoom` leaves to vram. */
const DRIVER_SLACK = 64 * MiB;

/** The Backend methods a test may stand in for (`patchBackend`). */
type BackendMethod = { [K in keyof Backend]: Backend[K] extends (...args: never[]) => unknown ? K : never }[keyof Backend];

/**
 * Stands `replace(original)` in for `backend[name]` until disposed, then puts the method back (an
 * own property restored, an inherited one uncovered): how a test counts or refuses driver calls.
 * `original` is bound to the backend.
 */
export function patchBackend<K extends BackendMethod>(backend: Backend, name: K, replace: (original: Backend[K]) => Backend[K]): Disposable {
  const target = backend as Backend & Record<K, Backend[K]>;
  const original = target[name];
  const own = Object.hasOwn(backend, name);
  target[name] = replace((original as (...args: never[]) => unknown).bind(backend) as Backend[K]);
  return {
    [Symbol.dispose]: () => {
      if (own) target[name] = original;
      else delete (target as Partial<Record<K, Backend[K]>>)[name];
    },
  };
}
