/**
 * The second Node process of the IPC tests (test/fixtures/ipc/node-peer.ts) driven one JSON
 * command at a time, and the count of emulated IPC resources a leak would leave behind.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { onGpu } from './helpers.js';

const peerScript = fileURLToPath(new URL('./fixtures/ipc/node-peer.js', import.meta.url));

/** One answer line of the peer. */
export interface Answer {
  readonly ok: boolean;
  readonly handle?: string;
  readonly hex?: string;
  readonly byteLength?: number;
  readonly name?: string;
  readonly code?: number;
  readonly errno?: number;
  readonly event?: string;
  readonly message?: string;
}

/** A Node peer process driven one JSON command at a time. */
export class Peer {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly lines: Interface;
  private readonly waiting: ((answer: Answer) => void)[] = [];
  readonly exited: Promise<number | null>;

  /** @param env Its environment (default this process's): VRAM_ALLOCATOR picks its default resource. */
  constructor(env: NodeJS.ProcessEnv = process.env) {
    this.child = spawn(process.execPath, [peerScript], { env });
    this.child.stderr.on('data', (d: Buffer) => process.stderr.write(`# peer: ${d.toString()}`));
    this.lines = createInterface({ input: this.child.stdout });
    this.lines.on('line', (line) => this.waiting.shift()?.(JSON.parse(line) as Answer));
    this.exited = new Promise((resolve) =>
      this.child.on('exit', (code) => {
        // A peer that dies answers every waiting command with a failure instead of leaving it pending.
        for (const waiter of this.waiting.splice(0)) waiter({ ok: false, name: 'Error', message: `the peer exited (${String(code)})` });
        resolve(code);
      }),
    );
  }

  /** Sends a command; resolves with the answer (rejects when the peer failed it). */
  async do(command: Record<string, unknown>): Promise<Answer> {
    const answer = await this.ask(command);
    if (!answer.ok) throw new Error(`peer failed ${String(command.op)}: ${answer.name}: ${answer.message}`);
    return answer;
  }

  /** Sends a command and resolves with the answer, failed or not. */
  ask(command: Record<string, unknown>): Promise<Answer> {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.child.stdin.write(`${JSON.stringify(command)}\n`);
    });
  }

  /** Kills the peer (SIGKILL: no cleanup of any kind) and waits until it is gone. */
  async kill(): Promise<void> {
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** Asks the peer to exit and waits for it. */
  async exit(): Promise<void> {
    this.child.stdin.end();
    await this.exited;
  }
}

/**
 * Shared-memory mappings and descriptors of the emulated IPC in this process (/proc/self/maps and
 * /proc/self/fd): what a leak would leave behind. Always 0 on a GPU, where the driver maps.
 */
export function emulatedIpcResources(): number {
  if (onGpu) return 0;
  const maps = readFileSync('/proc/self/maps', 'utf8')
    .split('\n')
    .filter((l) => l.includes('/memfd:vram-ipc-')).length;
  let fds = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).includes('/memfd:vram-ipc-')) fds++;
    } catch {
      // the descriptor readdir itself used, already closed
    }
  }
  return maps + fds;
}
