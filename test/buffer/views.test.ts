/**
 * Views of host-accessible memory (HostBuffer.view, ManagedBuffer.view) keep their buffer alive:
 * the garbage-collection backstop must never free memory a reachable view can still touch. The
 * scenario runs in a child process with --expose-gc (test/fixtures/view-keepalive.ts), since on a
 * GPU the failure is a segfault, which would take the test runner down with it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { HostBuffer } from '../../src/buffer/host-buffer.js';
import { ManagedBuffer } from '../../src/buffer/managed-buffer.js';
import { UseAfterFreeError } from '../../src/errors.js';

interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `node --expose-gc script` with this process's environment (so the same backend). */
function runNode(script: string): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--expose-gc', script], { env: process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

test('a view keeps its buffer alive through forced garbage collections (child process)', async () => {
  const script = fileURLToPath(new URL('../fixtures/view-keepalive.js', import.meta.url));
  const { code, signal, stdout, stderr } = await runNode(script);
  assert.equal(signal, null, `the child was killed by ${String(signal)} (touching a view of freed memory?)\n${stderr}`);
  assert.equal(code, 0, stderr);
  assert.match(stdout, /^ok$/m);
});

test('views of one buffer share one ArrayBuffer, and a freed buffer gives no new views', () => {
  const h = HostBuffer.allocate(4096);
  const a = h.view();
  const b = h.view(Float32Array, { byteOffset: 16, length: 4 });
  assert.equal(a.buffer, b.buffer);
  b[0] = 2.5;
  assert.equal(new Float32Array(a.buffer, 16, 1)[0], 2.5);
  h.free();
  assert.throws(() => h.view(), UseAfterFreeError);
  const m = ManagedBuffer.allocate(4096);
  assert.equal(m.view().buffer, m.view(Uint32Array).buffer);
  m.free();
  assert.throws(() => m.view(), UseAfterFreeError);
});
