/**
 * The few libc calls vram makes itself, through koffi: shared memory (memfd_create, mmap) for the
 * emulated backend's interprocess memory, and Unix-domain sockets with SCM_RIGHTS for passing file
 * descriptors between processes (Node has no public API for either). Linux only: other platforms
 * get a NotSupportedError naming the call, and nothing is loaded until a call is made, so importing
 * this module costs nothing on a machine that never uses IPC.
 *
 * Every call returns the raw result; a failure is a `SystemCallError` carrying errno, thrown by the
 * wrappers here so callers never see a bare -1.
 */
import koffi from 'koffi';
import { NotSupportedError, VramError } from '../errors.js';

/** A failed libc call, with its errno. */
export class SystemCallError extends VramError {
  /**
   * @param call The libc function that failed.
   * @param errno Its errno.
   * @param what What vram was doing, for the message.
   */
  constructor(readonly call: string, readonly errno: number, what: string) {
    super(`${call} failed with errno ${errno}${ERRNO_NAMES[errno] !== undefined ? ` (${ERRNO_NAMES[errno]})` : ''}: ${what}`);
  }
}

/** The errno values vram reports by name (Linux). */
export const Errno = {
  ENOENT: 2,
  EBADF: 9,
  EACCES: 13,
  EINVAL: 22,
  EPIPE: 32,
} as const;

const ERRNO_NAMES: Readonly<Record<number, string>> = { 2: 'ENOENT', 9: 'EBADF', 13: 'EACCES', 22: 'EINVAL', 32: 'EPIPE' };

/** mmap/open constants (Linux, all architectures vram runs on). */
const PROT_READ = 0x1;
const PROT_WRITE = 0x2;
const MAP_SHARED = 0x1;
const MAP_FAILED = 0xffff_ffff_ffff_ffffn;
const O_RDWR = 0x2;
const O_CLOEXEC = 0x80000;
const MFD_CLOEXEC = 0x1;

interface Libc {
  memfd_create(name: string, flags: number): number;
  ftruncate(fd: number, length: number): number;
  mmap(addr: number, length: number, prot: number, flags: number, fd: number, offset: number): bigint;
  munmap(addr: number, length: number): number;
  open(path: string, flags: number, mode: number): number;
  close(fd: number): number;
  readlink(path: string, buf: Uint8Array, size: number): number;
}

let libc: Libc | undefined;

/** Binds libc on first use; NotSupportedError off Linux. */
function load(call: string): Libc {
  if (libc !== undefined) return libc;
  if (process.platform !== 'linux') {
    throw new NotSupportedError(`${call}: vram's interprocess calls use Linux's memfd and /proc; ${process.platform} is not supported`);
  }
  const lib = koffi.load('libc.so.6');
  libc = {
    memfd_create: lib.func('int memfd_create(const char *name, unsigned int flags)') as Libc['memfd_create'],
    ftruncate: lib.func('int ftruncate(int fd, int64_t length)') as Libc['ftruncate'],
    mmap: lib.func('uint64_t mmap(uint64_t addr, size_t length, int prot, int flags, int fd, int64_t offset)') as Libc['mmap'],
    munmap: lib.func('int munmap(uint64_t addr, size_t length)') as Libc['munmap'],
    open: lib.func('int open(const char *path, int flags, int mode)') as Libc['open'],
    close: lib.func('int close(int fd)') as Libc['close'],
    readlink: lib.func('int64_t readlink(const char *path, uint8_t *buf, size_t size)') as Libc['readlink'],
  };
  return libc;
}

function errno(): number {
  return koffi.errno();
}

/**
 * A new anonymous shared-memory file of `bytes` (memfd_create + ftruncate), close-on-exec.
 *
 * @param name Shown in /proc/<pid>/fd as `/memfd:<name> (deleted)`.
 * @param bytes Its size.
 * @returns The file descriptor.
 * @throws {SystemCallError} When the kernel refuses.
 * @example
 * ```ts
 * const fd = memfdCreate('vram-ipc-1', 4096);
 * ```
 */
export function memfdCreate(name: string, bytes: number): number {
  const c = load('memfd_create');
  const fd = c.memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) throw new SystemCallError('memfd_create', errno(), `creating shared memory '${name}'`);
  if (c.ftruncate(fd, bytes) !== 0) {
    const e = errno();
    c.close(fd);
    throw new SystemCallError('ftruncate', e, `sizing shared memory '${name}' to ${bytes} bytes`);
  }
  return fd;
}

/**
 * Maps `bytes` of the file `fd` shared, readable and writable.
 *
 * @param fd The file.
 * @param bytes How much to map (rounded up to pages by the kernel).
 * @returns The address of the mapping.
 * @throws {SystemCallError} When mmap fails.
 * @example
 * ```ts
 * const address = mapShared(fd, 4096);
 * ```
 */
export function mapShared(fd: number, bytes: number): number {
  const address = load('mmap').mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address === MAP_FAILED) throw new SystemCallError('mmap', errno(), `mapping ${bytes} bytes of fd ${fd}`);
  return Number(address);
}

/**
 * Unmaps what `mapShared` mapped.
 *
 * @param address The mapping's address.
 * @param bytes Its size as mapped.
 * @throws {SystemCallError} When munmap fails.
 * @example
 * ```ts
 * unmap(address, 4096);
 * ```
 */
export function unmap(address: number, bytes: number): void {
  if (load('munmap').munmap(address, bytes) !== 0) throw new SystemCallError('munmap', errno(), `unmapping ${bytes} bytes`);
}

/**
 * Opens a path read-write, close-on-exec.
 *
 * @param path The path (here: `/proc/<pid>/fd/<n>` of another process's shared memory).
 * @returns The file descriptor.
 * @throws {SystemCallError} When open fails (ENOENT: that process or descriptor is gone).
 * @example
 * ```ts
 * const fd = openReadWrite(`/proc/${pid}/fd/${n}`);
 * ```
 */
export function openReadWrite(path: string): number {
  const fd = load('open').open(path, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw new SystemCallError('open', errno(), `opening ${path}`);
  return fd;
}

/**
 * Closes a file descriptor.
 *
 * @param fd The descriptor.
 * @throws {SystemCallError} When close fails (EBADF: not open).
 * @example
 * ```ts
 * closeFd(fd);
 * ```
 */
export function closeFd(fd: number): void {
  if (load('close').close(fd) !== 0) throw new SystemCallError('close', errno(), `closing fd ${fd}`);
}

/**
 * The target of a symbolic link (here: what `/proc/<pid>/fd/<n>` refers to).
 *
 * @param path The link.
 * @returns Its target, or undefined when there is no such link.
 * @example
 * ```ts
 * readLink(`/proc/self/fd/${fd}`); // '/memfd:vram-ipc-... (deleted)'
 * ```
 */
export function readLink(path: string): string | undefined {
  const buf = new Uint8Array(512);
  const n = Number(load('readlink').readlink(path, buf, buf.length));
  if (n < 0) return undefined;
  return Buffer.from(buf.buffer, 0, n).toString('utf8');
}
