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
import { readFileSync } from 'node:fs';
import koffi from 'koffi';
import { NotSupportedError, VramError } from '../errors.js';

/**
 * A failed libc call, with its errno.
 *
 * @example
 * ```ts
 * try { sendFd(path, fd, 'pool'); } catch (e) { if (e instanceof SystemCallError) console.error(e.call, e.errno); }
 * ```
 */
export class SystemCallError extends VramError {
  /**
   * @param call The libc function that failed.
   * @param errno Its errno.
   * @param what What vram was doing, for the message.
   * @throws Never.
   * @example
   * ```ts
   * throw new SystemCallError('sendmsg', 9, 'sending a descriptor');
   * ```
   */
  constructor(
    readonly call: string,
    readonly errno: number,
    what: string,
  ) {
    super(`${call} failed with errno ${errno}${ERRNO_NAMES[errno] !== undefined ? ` (${ERRNO_NAMES[errno]})` : ''}: ${what}`);
  }
}

/**
 * The errno values vram reports by name (Linux).
 *
 * @example
 * ```ts
 * if (e instanceof SystemCallError && e.errno === Errno.EBADF) console.error('not an open descriptor');
 * ```
 */
export const Errno = {
  ENOENT: 2,
  EBADF: 9,
  EACCES: 13,
  EINVAL: 22,
  EPIPE: 32,
} as const;

const ERRNO_NAMES: Readonly<Record<number, string>> = {
  1: 'EPERM',
  2: 'ENOENT',
  3: 'ESRCH',
  9: 'EBADF',
  13: 'EACCES',
  22: 'EINVAL',
  32: 'EPIPE',
  38: 'ENOSYS',
};

/** mmap/open constants (Linux, all architectures vram runs on). */
const PROT_READ = 0x1;
const PROT_WRITE = 0x2;
const MAP_SHARED = 0x1;
const MAP_FAILED = 0xffff_ffff_ffff_ffffn;
const O_RDWR = 0x2;
const O_CLOEXEC = 0x80000;
const MFD_CLOEXEC = 0x1;

interface Libc {
  socket(domain: number, type: number, protocol: number): number;
  bind(fd: number, addr: Uint8Array, len: number): number;
  listen(fd: number, backlog: number): number;
  accept4(fd: number, addr: null, len: null, flags: number): number;
  connect(fd: number, addr: Uint8Array, len: number): number;
  sendmsg(fd: number, msg: bigint, flags: number): number;
  recvmsg(fd: number, msg: bigint, flags: number): number;
  poll(fds: Uint8Array, count: number, timeoutMs: number): number;
  unlink(path: string): number;
  memfd_create(name: string, flags: number): number;
  ftruncate(fd: number, length: number): number;
  mmap(addr: number, length: number, prot: number, flags: number, fd: number, offset: number): bigint;
  munmap(addr: number, length: number): number;
  open(path: string, flags: number, mode: number): number;
  close(fd: number): number;
  readlink(path: string, buf: Uint8Array, size: number): number;
  syscall(n: number, a: number, b: number, c: number): number;
  prctl(option: number, arg2: bigint, arg3: number, arg4: number, arg5: number): number;
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
    socket: lib.func('int socket(int domain, int type, int protocol)') as Libc['socket'],
    bind: lib.func('int bind(int fd, const uint8_t *addr, uint32_t len)') as Libc['bind'],
    listen: lib.func('int listen(int fd, int backlog)') as Libc['listen'],
    accept4: lib.func('int accept4(int fd, void *addr, void *len, int flags)') as Libc['accept4'],
    connect: lib.func('int connect(int fd, const uint8_t *addr, uint32_t len)') as Libc['connect'],
    sendmsg: lib.func('int64_t sendmsg(int fd, uint64_t msg, int flags)') as Libc['sendmsg'],
    recvmsg: lib.func('int64_t recvmsg(int fd, uint64_t msg, int flags)') as Libc['recvmsg'],
    poll: lib.func('int poll(uint8_t *fds, uint64_t count, int timeout)') as Libc['poll'],
    unlink: lib.func('int unlink(const char *path)') as Libc['unlink'],
    memfd_create: lib.func('int memfd_create(const char *name, unsigned int flags)') as Libc['memfd_create'],
    ftruncate: lib.func('int ftruncate(int fd, int64_t length)') as Libc['ftruncate'],
    mmap: lib.func('uint64_t mmap(uint64_t addr, size_t length, int prot, int flags, int fd, int64_t offset)') as Libc['mmap'],
    munmap: lib.func('int munmap(uint64_t addr, size_t length)') as Libc['munmap'],
    open: lib.func('int open(const char *path, int flags, int mode)') as Libc['open'],
    close: lib.func('int close(int fd)') as Libc['close'],
    readlink: lib.func('int64_t readlink(const char *path, uint8_t *buf, size_t size)') as Libc['readlink'],
    syscall: lib.func('long syscall(long n, long a, long b, long c)') as Libc['syscall'],
    prctl: lib.func('int prctl(int option, uint64_t arg2, uint64_t arg3, uint64_t arg4, uint64_t arg5)') as Libc['prctl'],
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

// --- Descriptors of another process (pidfd_getfd) ---

/** Syscall numbers of pidfd_open and pidfd_getfd: the same on every architecture (asm-generic, Linux 5.3 and 5.6). */
const SYS_PIDFD_OPEN = 434;
const SYS_PIDFD_GETFD = 438;
/** prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): Yama's opt-in for being read by processes that are not ancestors. */
const PR_SET_PTRACER = 0x59616d61;
const PR_SET_PTRACER_ANY = 0xffff_ffff_ffff_ffffn;
let ptracerSet = false;

/**
 * A copy, in this process, of descriptor `fd` of process `pid` (pidfd_open, then pidfd_getfd):
 * how an importer takes the file descriptors an exporter keeps open for it, with no socket and no
 * conversation. The kernel checks ptrace access to `pid` (same user; under Yama's ptrace_scope 1
 * the exporter has opted in with `allowDescriptorCopies`).
 *
 * @param pid The process holding the descriptor.
 * @param fd Its descriptor number there.
 * @returns This process's descriptor (close-on-exec); close it with `closeFd`.
 * @throws {SystemCallError} ESRCH when `pid` is gone, EBADF when `fd` is not open there, EPERM
 *   when ptrace access is refused, ENOSYS on kernels before 5.6.
 * @example
 * ```ts
 * const mine = copyDescriptor(exporterPid, 17);
 * ```
 */
export function copyDescriptor(pid: number, fd: number): number {
  const c = load('pidfd_getfd');
  const pidfd = Number(c.syscall(SYS_PIDFD_OPEN, pid, 0, 0));
  if (pidfd < 0) throw new SystemCallError('pidfd_open', errno(), `opening process ${pid} (has it exited?)`);
  try {
    const copy = Number(c.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0));
    if (copy < 0) {
      const e = errno();
      throw new SystemCallError(
        'pidfd_getfd',
        e,
        `copying descriptor ${fd} of process ${pid}` +
          (e === 1
            ? ' (ptrace access refused: same user needed; under Yama ptrace_scope 2 or 3 give the importer CAP_SYS_PTRACE, or pass the descriptors with sendFd)'
            : ''),
      );
    }
    return copy;
  } finally {
    c.close(pidfd);
  }
}

/**
 * Lets other processes of this user copy this process's descriptors (`copyDescriptor`) where
 * Yama's ptrace_scope 1 would allow only its ancestors: prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY),
 * once per process, and only where Yama is on (ptrace_scope readable and 1). An exporter calls it
 * before handing out handles whose descriptors an importer copies.
 *
 * @example
 * ```ts
 * allowDescriptorCopies();
 * ```
 */
export function allowDescriptorCopies(): void {
  if (ptracerSet) return;
  ptracerSet = true;
  let scope = '';
  try {
    scope = readFileSync('/proc/sys/kernel/yama/ptrace_scope', 'utf8').trim();
  } catch {
    return; // no Yama: same-user access is the kernel's default
  }
  if (scope === '1') load('prctl').prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

// --- Unix-domain sockets with SCM_RIGHTS ---

const AF_UNIX = 1;
const SOCK_STREAM = 1;
const SOCK_CLOEXEC = 0x80000;
const SOL_SOCKET = 1;
const SCM_RIGHTS = 1;
const POLLIN = 0x1;
const MSG_CMSG_CLOEXEC = 0x40000000;
const MSG_NOSIGNAL = 0x4000;
/** sizeof(struct sockaddr_un): sun_family (2 bytes) and sun_path[108]. */
const SOCKADDR_UN_BYTES = 110;
/** The largest message sent beside a descriptor (the payloads are handles of 64 bytes or so). */
export const MAX_MESSAGE_BYTES = 4096;

/** struct sockaddr_un for `path`; RangeError when the path does not fit (107 bytes and a NUL). */
function unixAddress(path: string): Uint8Array {
  const name = Buffer.from(path, 'utf8');
  if (name.length === 0 || name.length > SOCKADDR_UN_BYTES - 3) {
    throw new RangeError(`a Unix socket path is 1 to ${SOCKADDR_UN_BYTES - 3} bytes, got ${name.length}: ${path}`);
  }
  const addr = new Uint8Array(SOCKADDR_UN_BYTES);
  new DataView(addr.buffer).setUint16(0, AF_UNIX, true);
  addr.set(name, 2);
  return addr;
}

function socketFd(what: string): number {
  const fd = load('socket').socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw new SystemCallError('socket', errno(), what);
  return fd;
}

/** Closes `fd` while another error is on its way out (a failed close would hide that error). */
function closeQuietly(fd: number): void {
  load('close').close(fd);
}

/**
 * A listening Unix-domain stream socket bound to `path` (which must not exist).
 *
 * @param path The socket's path.
 * @returns The listening descriptor.
 * @throws {SystemCallError} When bind or listen fails (EADDRINUSE: the path exists).
 * @throws {RangeError} When the path is empty or too long for sockaddr_un.
 * @example
 * ```ts
 * const server = listenUnix('/tmp/vram.sock');
 * ```
 */
export function listenUnix(path: string): number {
  const addr = unixAddress(path);
  const c = load('bind');
  const fd = socketFd(`listening on ${path}`);
  if (c.bind(fd, addr, addr.length) !== 0 || c.listen(fd, 1) !== 0) {
    const e = errno();
    closeQuietly(fd);
    throw new SystemCallError('bind/listen', e, `listening on ${path}`);
  }
  return fd;
}

/**
 * A stream socket connected to the listener at `path`.
 *
 * @param path The listener's path.
 * @returns The connected descriptor.
 * @throws {SystemCallError} When connect fails (ENOENT or ECONNREFUSED: nobody listens there).
 * @throws {RangeError} When the path is empty or too long for sockaddr_un.
 * @example
 * ```ts
 * const fd = connectUnix('/tmp/vram.sock');
 * ```
 */
export function connectUnix(path: string): number {
  const addr = unixAddress(path);
  const fd = socketFd(`connecting to ${path}`);
  if (load('connect').connect(fd, addr, addr.length) !== 0) {
    const e = errno();
    closeQuietly(fd);
    throw new SystemCallError('connect', e, `connecting to ${path}`);
  }
  return fd;
}

/**
 * Accepts one connection on a listening socket that `readable` said is ready.
 *
 * @param listener The listening descriptor.
 * @returns The connection's descriptor (close-on-exec).
 * @throws {SystemCallError} When accept fails.
 * @example
 * ```ts
 * const conn = acceptUnix(server);
 * ```
 */
export function acceptUnix(listener: number): number {
  const fd = load('accept4').accept4(listener, null, null, SOCK_CLOEXEC);
  if (fd < 0) throw new SystemCallError('accept4', errno(), 'accepting a connection');
  return fd;
}

/**
 * True when reading `fd` (or accepting on it) would not block; never waits.
 *
 * @param fd The descriptor.
 * @returns Whether it is readable now (also when the peer hung up: the read then returns 0).
 * @throws {SystemCallError} When poll fails.
 * @example
 * ```ts
 * await pollUntil(() => readable(fd));
 * ```
 */
export function readable(fd: number): boolean {
  const pfd = new Uint8Array(8);
  const view = new DataView(pfd.buffer);
  view.setInt32(0, fd, true);
  view.setInt16(4, POLLIN, true);
  const n = load('poll').poll(pfd, 1, 0);
  if (n < 0) throw new SystemCallError('poll', errno(), `polling fd ${fd}`);
  return n > 0;
}

/**
 * Native memory for one sendmsg/recvmsg: msghdr (56 bytes at 0), one iovec (at 64), a control
 * message with room for one descriptor (CMSG_SPACE(4) = 24 bytes at 80) and the payload (at 128).
 * The layouts are those of Linux on 64-bit targets (x86-64 and aarch64 alike).
 */
function withMessage<T>(payloadBytes: number, use: (base: bigint, view: DataView) => T): T {
  const size = 128 + Math.max(payloadBytes, 1);
  const base = koffi.alloc('uint8_t', size) as bigint;
  try {
    const view = new DataView(koffi.view(base, size));
    for (let i = 0; i < size; i++) view.setUint8(i, 0);
    view.setBigUint64(16, base + 64n, true); // msg_iov
    view.setBigUint64(24, 1n, true); // msg_iovlen
    view.setBigUint64(32, base + 80n, true); // msg_control
    view.setBigUint64(40, 24n, true); // msg_controllen
    view.setBigUint64(64, base + 128n, true); // iov_base
    view.setBigUint64(72, BigInt(payloadBytes), true); // iov_len
    return use(base, view);
  } finally {
    koffi.free(base);
  }
}

/**
 * Sends `payload` and the descriptor `fd` (SCM_RIGHTS) on a connected Unix stream socket: the
 * receiver gets its own descriptor for the same open file. What Python's `socket.send_fds` does.
 *
 * @param socket The connected socket.
 * @param fd The descriptor to pass.
 * @param payload 1 to MAX_MESSAGE_BYTES bytes sent with it.
 * @throws {SystemCallError} When sendmsg fails (EBADF: `fd` is not open).
 * @throws {RangeError} For an empty or too large payload.
 * @example
 * ```ts
 * sendWithFd(conn, poolFd, new TextEncoder().encode('pool'));
 * ```
 */
export function sendWithFd(socket: number, fd: number, payload: Uint8Array): void {
  if (payload.length === 0 || payload.length > MAX_MESSAGE_BYTES) {
    throw new RangeError(`the message sent with a descriptor is 1 to ${MAX_MESSAGE_BYTES} bytes, got ${payload.length}`);
  }
  withMessage(payload.length, (base, view) => {
    view.setBigUint64(80, 20n, true); // cmsg_len = CMSG_LEN(sizeof(int))
    view.setInt32(88, SOL_SOCKET, true);
    view.setInt32(92, SCM_RIGHTS, true);
    view.setInt32(96, fd, true);
    new Uint8Array(view.buffer, 128, payload.length).set(payload);
    const sent = Number(load('sendmsg').sendmsg(socket, base, MSG_NOSIGNAL));
    if (sent < 0) throw new SystemCallError('sendmsg', errno(), `sending fd ${fd}`);
    if (sent !== payload.length) throw new SystemCallError('sendmsg', 0, `sent ${sent} of ${payload.length} bytes`);
  });
}

/**
 * Receives one message and the descriptor sent with it (close-on-exec) from a Unix stream socket
 * that `readable` said is ready.
 *
 * @param socket The connected socket.
 * @returns The payload and the new descriptor (undefined when none came with it).
 * @throws {SystemCallError} When recvmsg fails or the peer closed without sending.
 * @example
 * ```ts
 * const { fd, payload } = receiveWithFd(conn);
 * ```
 */
export function receiveWithFd(socket: number): { payload: Uint8Array; fd: number | undefined } {
  return withMessage(MAX_MESSAGE_BYTES, (base, view) => {
    const n = Number(load('recvmsg').recvmsg(socket, base, MSG_CMSG_CLOEXEC));
    if (n < 0) throw new SystemCallError('recvmsg', errno(), 'receiving a descriptor');
    if (n === 0) throw new SystemCallError('recvmsg', 0, 'the sender closed the connection without sending anything');
    const payload = new Uint8Array(view.buffer.slice(128, 128 + n));
    const controlLength = Number(view.getBigUint64(40, true));
    const hasFd = controlLength >= 20 && view.getInt32(88, true) === SOL_SOCKET && view.getInt32(92, true) === SCM_RIGHTS;
    return { payload, fd: hasFd ? view.getInt32(96, true) : undefined };
  });
}

/**
 * Removes a socket's path (after its listener is closed); a missing path is not an error.
 *
 * @param path The path.
 * @example
 * ```ts
 * removePath('/tmp/vram.sock');
 * ```
 */
export function removePath(path: string): void {
  load('unlink').unlink(path);
}
