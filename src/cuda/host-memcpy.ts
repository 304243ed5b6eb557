/**
 * The C library's `memcpy`, bound through koffi, and the native address of JavaScript memory: what
 * the staged-transfer threads (src/buffer/transfer) copy with. Host copies between native
 * addresses are the one thing below the Backend that is not CUDA: they must run on worker threads,
 * where neither JavaScript's `TypedArray.set` (it needs the ArrayBuffer, which cannot be shared with
 * a worker) nor the driver (its pageable copies are what staging replaces) can do them.
 *
 * Addresses are passed as `uintptr_t` numbers (exact below 2^53, as every address vram handles),
 * so a worker thread can copy between memory it was only told the address of.
 */
import koffi from 'koffi';

/** `memcpy(dst, src, bytes)` between native addresses. */
export type HostMemcpy = (dst: number, src: number, bytes: number) => void;

/** The libraries tried for `memcpy`, in order. */
const LIBC_CANDIDATES: Readonly<Partial<Record<NodeJS.Platform, readonly string[]>>> = {
  linux: ['libc.so.6', 'libc.so'],
  darwin: ['libSystem.B.dylib'],
  win32: ['msvcrt.dll'],
};

let bound: HostMemcpy | undefined;

/**
 * Binds the C library's `memcpy` (once per thread: each worker binds its own).
 *
 * @returns `memcpy` over native addresses.
 * @throws {Error} When no C library with `memcpy` loads, naming what was tried.
 * @example
 * ```ts
 * const memcpy = hostMemcpy();
 * memcpy(nativeAddress(dst), nativeAddress(src), src.byteLength);
 * ```
 */
export function hostMemcpy(): HostMemcpy {
  if (bound !== undefined) return bound;
  const tried: string[] = [];
  for (const name of LIBC_CANDIDATES[process.platform] ?? ['libc.so.6']) {
    try {
      const fn = koffi.load(name).func('void *memcpy(uintptr_t dst, uintptr_t src, size_t n)');
      bound = (dst, src, bytes) => {
        fn(dst, src, bytes);
      };
      return bound;
    } catch (error) {
      tried.push(`${name} (${error instanceof Error ? error.message.split('\n')[0] : String(error)})`);
    }
  }
  throw new Error(`cannot bind memcpy from the C library; tried ${tried.join(', ')}`);
}

/**
 * The native address of the first byte of JavaScript memory. koffi moves an on-heap TypedArray's
 * storage off the heap first, so the address stays valid while the memory is reachable and not
 * detached (the caller keeps it reachable, and checks detachment, for as long as it uses the address).
 *
 * @param memory An ArrayBuffer or a view (its byteOffset is included).
 * @returns The address, a whole number below 2^53.
 * @throws {RangeError} For an address at or above 2^53 (never seen on x86-64 or aarch64).
 * @example
 * ```ts
 * const data = new Float32Array(1 << 20);
 * const address = nativeAddress(data.subarray(16)); // nativeAddress(data) + 64
 * ```
 */
export function nativeAddress(memory: ArrayBuffer | ArrayBufferView): number {
  const address = Number(koffi.address(memory));
  if (!Number.isSafeInteger(address)) throw new RangeError('nativeAddress: address beyond 2^53');
  return address;
}
