/**
 * What fabric handles need of the host (an IMEX channel, src/resource/fabric-support.ts), planted
 * in a folder of the test's own for `VRAM_IMEX_ROOT` (the emulated backend models the driver; the
 * host's files are the host's), and whether this machine has it for real (a GPU run).
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Device } from '../src/device.js';
import { FabricUnavailableError } from '../src/errors.js';
import { checkFabricSupport, type FabricUse } from '../src/resource/fabric-support.js';
import { onGpu } from './helpers.js';

/** What to plant: each piece the check reads, present by default. */
export interface PlantOptions {
  /** Whether /proc/devices lists nvidia-caps-imex-channels (default true). */
  readonly procDevices?: boolean;
  /** Whether /dev/nvidia-caps-imex-channels/ exists (default true). */
  readonly channelDirectory?: boolean;
  /** channel0: a file this user opens, one with no permissions, a link to nothing, or none (default 'open'). */
  readonly channel?: 'open' | 'no-permission' | 'dangling' | 'none';
}

/** A planted root: its path (for VRAM_IMEX_ROOT) and its removal. */
export interface PlantedImex {
  readonly root: string;
  remove(): void;
}

/**
 * A folder laid out as the check reads the host: proc/devices (a real one's character devices,
 * with nvidia-caps-imex-channels at major 234 as NVIDIA's IMEX guide shows) and
 * dev/nvidia-caps-imex-channels/channel0 (a plain file standing in for the character device: the
 * check only opens it).
 * @param options The pieces to leave out or spoil.
 * @returns The root.
 */
export function plantImex(options: PlantOptions = {}): PlantedImex {
  const root = mkdtempSync(path.join(tmpdir(), 'vram-imex-'));
  mkdirSync(path.join(root, 'proc'));
  const imex = options.procDevices === false ? '' : '234 nvidia-caps-imex-channels\n';
  writeFileSync(path.join(root, 'proc/devices'), `Character devices:\n  1 mem\n195 nvidia\n${imex}\nBlock devices:\n  7 loop\n`);
  if (options.channelDirectory !== false) {
    const dir = path.join(root, 'dev/nvidia-caps-imex-channels');
    mkdirSync(dir, { recursive: true });
    const channel = path.join(dir, 'channel0');
    switch (options.channel ?? 'open') {
      case 'open':
        writeFileSync(channel, '');
        break;
      case 'no-permission':
        writeFileSync(channel, '', { mode: 0o000 });
        break;
      case 'dangling':
        symlinkSync(path.join(root, 'gone'), channel);
        break;
      case 'none':
        break;
    }
  }
  return { root, remove: () => rmSync(root, { recursive: true, force: true }) };
}

/**
 * Runs `body` with VRAM_IMEX_ROOT at `root`, restoring it after.
 * @param root The planted root.
 * @param body What to run.
 * @returns What `body` returns.
 */
export function withImexRoot<T>(root: string, body: () => T): T {
  const before = process.env.VRAM_IMEX_ROOT;
  process.env.VRAM_IMEX_ROOT = root;
  try {
    return body();
  } finally {
    if (before === undefined) delete process.env.VRAM_IMEX_ROOT;
    else process.env.VRAM_IMEX_ROOT = before;
  }
}

/**
 * On a GPU, why fabric handles cannot run here (the check's message), or false when they can; on
 * the emulated backend always false (the tests plant the host's part).
 * @param use `pool` or `physical`.
 * @returns The skip reason, or false.
 */
export function fabricSkip(use: FabricUse): string | false {
  if (!onGpu) return false;
  try {
    checkFabricSupport(Device.get(0), use, 'the fabric tests');
    return false;
  } catch (error) {
    if (error instanceof FabricUnavailableError) return `this machine lacks fabric handles: ${error.message}`;
    throw error;
  }
}
