/**
 * The rendezvous under the emulated backend's collectives (collective-calls.ts): the ranks of one communicator are
 * processes of one machine that meet in a folder named by the unique id (under the system's
 * temporary folder), and exchange whole payloads as files there. A file appears by rename, so a
 * reader never sees half of one. Every call blocks the calling thread until its peers' files are
 * there (or the timeout passes): the emulated backend runs a stream's work when asked, on the
 * thread that asks, so a collective is complete when its call returns, which stream order allows.
 *
 * - Collectives are numbered in the order each rank calls them (NCCL's own rule: every rank calls
 *   the same collectives in the same order). Every rank writes a file for every collective (empty
 *   when it contributes nothing, as a broadcast's non-roots) and reads all of them; the last rank
 *   to finish reading removes the collective's files.
 * - A send is a file per (sender, receiver, n-th send between them); the receiver reads and
 *   removes it. A send never waits, so sends queued before receives (`group`) cannot deadlock.
 * - The last rank to leave removes the folder.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, renameSync, rmdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { NcclError } from '../../errors.js';

/** ncclResult_t codes the emulation raises. */
const INVALID_USAGE = 5;
const REMOTE_ERROR = 6;

/**
 * What the ranks of one collective must agree on (NCCL's rule; NCCL itself does not check it):
 * the element count and type, and the reduction operator or the root where the call has one.
 */
export interface CollectiveSignature {
  /** The element count NCCL is given (the per-rank count for allGather, recv's for reduceScatter). */
  readonly count: number;
  /** The element type NCCL sees. */
  readonly dtype: string;
  /** The reduction, for allReduce and reduceScatter. */
  readonly op?: string;
  /** The root, for broadcast. */
  readonly root?: number;
}

/** A signature with the call it belongs to, as each rank publishes it. */
interface SignedCall extends CollectiveSignature {
  readonly call: string;
}

/** How a field of a call reads in a mismatch. */
const FIELDS: readonly [keyof SignedCall, string][] = [
  ['call', 'collective'],
  ['count', 'count'],
  ['dtype', 'dtype'],
  ['op', 'op'],
  ['root', 'root'],
];

/**
 * The first field on which the ranks' calls of one collective differ, said with each rank's
 * value, or undefined when they agree.
 */
function firstMismatch(calls: readonly SignedCall[]): string | undefined {
  for (const [field, name] of FIELDS) {
    const values = calls.map((c) => c[field]);
    if (values.every((v) => v === values[0])) continue;
    const said = values.map((v, rank) => `rank ${rank}: ${v === undefined ? 'none' : String(v)}`).join(', ');
    return (
      `the ranks' calls of this collective differ in ${name} (${said}): every rank must make the same ` +
      'collective with the same count, dtype, op and root, in the same order'
    );
  }
  return undefined;
}

/** The blocking sleep between looks for a peer's file: a SharedArrayBuffer to `Atomics.wait` on. */
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * Sleeps the calling thread (the main thread too: Node allows Atomics.wait there).
 *
 * @param ms How long.
 */
function sleep(ms: number): void {
  Atomics.wait(sleeper, 0, 0, ms);
}

/** One rank's end of an emulated communicator. */
export class CollectiveChannel {
  /** The rendezvous folder. */
  readonly dir: string;
  /** How many collectives this rank has called. */
  #collectives = 0;
  /** Sends to each peer so far, and receives from each. */
  readonly #sent = new Map<number, number>();
  readonly #received = new Map<number, number>();
  #closed = false;

  /**
   * Joins the rendezvous of `id` as `rank` of `size` and waits for every other rank to join.
   *
   * @param id The unique id's bytes (any length; only their hash names the folder).
   * @param rank This process's rank.
   * @param size The number of ranks.
   * @param timeout Milliseconds to wait for peers before an NcclError.
   * @throws {NcclError} When another process already joined as `rank`, a rank joined with another
   *   size, or the others do not come within `timeout`.
   */
  constructor(
    id: Uint8Array,
    readonly rank: number,
    readonly size: number,
    readonly timeout: number,
  ) {
    const key = createHash('sha256').update(id).digest('hex').slice(0, 32);
    this.dir = path.join(tmpdir(), `vram-nccl-${key}`);
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const mine = this.#file(`join.${rank}`);
    const temporary = this.#file(`.join.${rank}.${process.pid}.${randomBytes(4).toString('hex')}`);
    writeFileSync(temporary, JSON.stringify({ size, pid: process.pid }));
    try {
      // A hard link fails when the name exists: two processes cannot both join as one rank.
      linkSync(temporary, mine);
    } catch {
      throw new NcclError(
        'ncclCommInitRank',
        INVALID_USAGE,
        'invalid usage',
        `rank ${rank} of this unique id has already joined (each rank joins once, from one process)`,
      );
    } finally {
      unlinkSync(temporary);
    }
    try {
      for (let peer = 0; peer < size; peer++) {
        const joined = JSON.parse(this.#wait('ncclCommInitRank', `join.${peer}`, peer).toString('utf8')) as { size: number };
        if (joined.size !== size) {
          throw new NcclError(
            'ncclCommInitRank',
            INVALID_USAGE,
            'invalid usage',
            `rank ${peer} joined this unique id with size ${joined.size}, rank ${rank} with size ${size}`,
          );
        }
      }
    } catch (error) {
      // A rank that disagrees on the size stays joined, so the others see it and fail too; one that
      // timed out takes itself back, and the folder when nobody else is in it.
      if (error instanceof NcclError && error.result === INVALID_USAGE) throw error;
      rmSync(mine, { force: true });
      try {
        rmdirSync(this.dir);
      } catch {
        /* others are there */
      }
      throw error;
    }
  }

  /** The path of a file in the rendezvous folder. */
  #file(name: string): string {
    return path.join(this.dir, name);
  }

  /** Writes a file whole: to a private name, then renamed into place. */
  #publish(name: string, data: Uint8Array): void {
    const temporary = this.#file(`.${name}.${process.pid}`);
    writeFileSync(temporary, data);
    renameSync(temporary, this.#file(name));
  }

  /**
   * Waits for a file and reads it.
   *
   * @param call The NCCL call it stands for, for the error.
   * @param name The file.
   * @param peer The rank that writes it, for the error.
   * @returns Its bytes.
   * @throws {NcclError} ncclRemoteError when it does not come within the timeout.
   */
  #wait(call: string, name: string, peer: number): Buffer {
    const deadline = Date.now() + this.timeout;
    let pause = 0.05;
    for (;;) {
      try {
        return readFileSync(this.#file(name));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
      if (Date.now() > deadline) {
        throw new NcclError(
          call,
          REMOTE_ERROR,
          'remote process exited or there was a network error',
          `rank ${this.rank} waited ${this.timeout} ms for rank ${peer} (emulated backend; the timeout option of Communicator.init sets the wait)`,
        );
      }
      sleep(pause);
      pause = Math.min(pause * 2, 5);
    }
  }

  /**
   * One collective: publishes this rank's payload with what the call was (`signature`), and
   * returns every rank's payload, in rank order, once every rank's call is known to be the same
   * collective. Every rank holds every rank's signature, so a mismatch (NCCL leaves it undefined:
   * a hang or wrong data) is the same NcclError on every rank, naming the first field that differs;
   * the collective's files are gone either way, so the ranks stay in step for the next one.
   *
   * @param call The NCCL call it stands for, for errors.
   * @param payload What this rank contributes (empty for nothing).
   * @param signature What every rank must agree on: element count, type, and the operator or root where the call has one.
   * @returns The payloads of ranks 0 to size - 1.
   * @throws {NcclError} ncclInvalidUsage when the ranks' calls differ; ncclRemoteError when a peer does not come within the timeout.
   */
  exchange(call: string, payload: Uint8Array, signature: CollectiveSignature): Buffer[] {
    const n = this.#collectives++;
    const mine: SignedCall = { call, ...signature };
    const header = Buffer.from(JSON.stringify(mine), 'utf8');
    const framed = Buffer.alloc(4 + header.byteLength + payload.byteLength);
    framed.writeUInt32LE(header.byteLength, 0);
    header.copy(framed, 4);
    framed.set(payload, 4 + header.byteLength);
    this.#publish(`c${n}.${this.rank}`, framed);
    const calls: SignedCall[] = [];
    const all: Buffer[] = [];
    for (let peer = 0; peer < this.size; peer++) {
      const data = this.#wait(call, `c${n}.${peer}`, peer);
      const length = data.readUInt32LE(0);
      calls.push(JSON.parse(data.subarray(4, 4 + length).toString('utf8')) as SignedCall);
      all.push(data.subarray(4 + length));
    }
    // Every rank marks the collective read; the one that sees every mark removes its files.
    writeFileSync(this.#file(`c${n}.read.${this.rank}`), '');
    let allRead = true;
    for (let peer = 0; peer < this.size && allRead; peer++) allRead = existsSync(this.#file(`c${n}.read.${peer}`));
    if (allRead) {
      for (let peer = 0; peer < this.size; peer++) {
        rmSync(this.#file(`c${n}.${peer}`), { force: true });
        rmSync(this.#file(`c${n}.read.${peer}`), { force: true });
      }
    }
    const mismatch = firstMismatch(calls);
    if (mismatch !== undefined) throw new NcclError(call, INVALID_USAGE, 'invalid usage', mismatch);
    return all;
  }

  /**
   * Sends `payload` to `peer`; never waits.
   *
   * @param peer The receiving rank.
   * @param payload The bytes.
   */
  send(peer: number, payload: Uint8Array): void {
    const n = this.#sent.get(peer) ?? 0;
    this.#sent.set(peer, n + 1);
    this.#publish(`p${this.rank}-${peer}.${n}`, payload);
  }

  /**
   * Receives the next payload `peer` sends to this rank.
   *
   * @param peer The sending rank.
   * @param byteLength The bytes this rank receives: NCCL requires the sender's count to match.
   * @returns The bytes.
   * @throws {NcclError} When the sender sent another size, or nothing within the timeout.
   */
  recv(peer: number, byteLength: number): Buffer {
    const n = this.#received.get(peer) ?? 0;
    const name = `p${peer}-${this.rank}.${n}`;
    const data = this.#wait('ncclRecv', name, peer);
    this.#received.set(peer, n + 1);
    rmSync(this.#file(name), { force: true });
    if (data.byteLength !== byteLength) {
      throw new NcclError(
        'ncclRecv',
        INVALID_USAGE,
        'invalid usage',
        `rank ${peer} sent ${data.byteLength} bytes and rank ${this.rank} receives ${byteLength} (a send and its receive must have the same count and type)`,
      );
    }
    return data;
  }

  /** Leaves the rendezvous; the last rank to leave removes the folder. Waits for nobody. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      writeFileSync(this.#file(`left.${this.rank}`), '');
      let all = true;
      for (let peer = 0; peer < this.size && all; peer++) all = existsSync(this.#file(`left.${peer}`));
      if (all) rmSync(this.dir, { recursive: true, force: true });
    } catch {
      // The folder went already (another rank removed it): nothing is left to clean.
    }
  }
}
