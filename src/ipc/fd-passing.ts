/**
 * Passing a file descriptor to another process over a Unix-domain socket (SCM_RIGHTS), which is
 * how an exported stream-ordered pool (a POSIX file descriptor) reaches its importer. Node has no
 * public API for it, so the socket calls are libc's through koffi (src/cuda/libc.ts). The other
 * side may be Python: `socket.send_fds(sock, [message], [fd])` and `socket.recv_fds(sock, 4096, 1)`
 * on an AF_UNIX stream socket speak the same protocol (one message, one descriptor).
 *
 * A descriptor number means nothing in another process: only the kernel's copy made by
 * SCM_RIGHTS is usable there, which is why it travels this way and not as text.
 *
 * The receiver listens at a path and waits without blocking the event loop (poll, then accept and
 * recvmsg once they cannot block); the sender connects, sends and closes.
 */
import { VramError } from '../errors.js';
import { pollUntil } from '../stream.js';
import { acceptUnix, closeFd, connectUnix, listenUnix, MAX_MESSAGE_BYTES, readable, receiveWithFd, removePath, sendWithFd } from '../cuda/libc.js';
import { readOptions } from '../util/options.js';

/** What `receiveFd` returns: the descriptor (this process's own, close-on-exec) and the message sent with it. */
export interface ReceivedFd {
  /** The descriptor; close it with `closeFd` once used (importing a pool does not close it). */
  readonly fd: number;
  /** The bytes sent with it. */
  readonly message: Uint8Array;
}

/** Options of `receiveFd`. */
export interface ReceiveFdOptions {
  /** Give up after this many milliseconds (default 30 000). */
  readonly timeoutMs?: number;
}

/**
 * Sends `fd` with `message` to the process listening at `path` (its `receiveFd`, or a Python
 * `recv_fds`). Returns once the kernel holds the message; the sender may close its `fd` then.
 *
 * @param path The listener's socket path.
 * @param fd The descriptor to send.
 * @param message 1 to 4096 bytes (or a string, sent as UTF-8) that travel with it.
 * @throws {SystemCallError} When nobody listens at `path` (ENOENT/ECONNREFUSED) or `fd` is not an
 *   open descriptor (EBADF); nothing stays open.
 * @throws {TypeError | RangeError} For a bad path, descriptor or message.
 * @example
 * ```ts
 * const fd = exportPool(resource);
 * sendFd('/tmp/peer.sock', fd, 'pool');
 * closeFd(fd);
 * ```
 */
export function sendFd(path: string, fd: number, message: Uint8Array | string): void {
  if (typeof path !== 'string') throw new TypeError('sendFd: path must be a string');
  if (!Number.isInteger(fd) || fd < 0) throw new RangeError(`sendFd: fd must be a descriptor (a whole number >= 0), got ${String(fd)}`);
  const payload = typeof message === 'string' ? new TextEncoder().encode(message) : message;
  if (!(payload instanceof Uint8Array)) throw new TypeError('sendFd: message must be a Uint8Array or a string');
  if (payload.length === 0 || payload.length > MAX_MESSAGE_BYTES) {
    throw new RangeError(`sendFd: the message is 1 to ${MAX_MESSAGE_BYTES} bytes, got ${payload.length}`);
  }
  const socket = connectUnix(path);
  try {
    sendWithFd(socket, fd, payload);
  } finally {
    closeFd(socket);
  }
}

/**
 * Listens at `path` (which must not exist) for one sender, and resolves with the descriptor and
 * message it sends; the socket and its path are gone afterwards, whatever happened. Waits without
 * blocking the event loop.
 *
 * @param path Where to listen (a path of at most 107 bytes, e.g. in os.tmpdir()).
 * @param options `timeoutMs`.
 * @returns The descriptor and message.
 * @throws {SystemCallError} When the path cannot be listened on (EADDRINUSE: it exists).
 * @throws {VramError} When nothing arrived in time, or a message came without a descriptor.
 * @example
 * ```ts
 * const { fd, message } = await receiveFd('/tmp/peer.sock');
 * using pool = importPool(fd);
 * closeFd(fd);
 * ```
 */
export async function receiveFd(path: string, options: ReceiveFdOptions = {}): Promise<ReceivedFd> {
  if (typeof path !== 'string') throw new TypeError('receiveFd: path must be a string');
  options = readOptions('receiveFd', options, { timeoutMs: true });
  const timeoutMs = options.timeoutMs ?? 30_000;
  if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) throw new RangeError(`receiveFd: timeoutMs must be a number >= 0, got ${String(timeoutMs)}`);
  const deadline = performance.now() + timeoutMs;
  const listener = listenUnix(path);
  let connection: number | undefined;
  try {
    await waitReadable(listener, deadline, path);
    connection = acceptUnix(listener);
    await waitReadable(connection, deadline, path);
    const { fd, payload } = receiveWithFd(connection);
    if (fd === undefined) throw new VramError(`receiveFd: a message of ${payload.length} bytes came to ${path} without a file descriptor`);
    return { fd, message: payload };
  } finally {
    if (connection !== undefined) closeFd(connection);
    closeFd(listener);
    removePath(path);
  }
}

async function waitReadable(fd: number, deadline: number, path: string): Promise<void> {
  await pollUntil(() => readable(fd) || performance.now() > deadline);
  if (!readable(fd)) throw new VramError(`receiveFd: nothing arrived at ${path} in time`);
}
