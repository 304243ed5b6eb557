/**
 * What fabric handles (CU_MEM_HANDLE_TYPE_FABRIC, memory shared over NVLink across hosts) need,
 * checked before the driver is asked, so a missing piece is an error that names it and says what
 * to run rather than the driver's CUDA_ERROR_NOT_PERMITTED (Note [Fabric prerequisites],
 * docs/design/fabric-handles.md). The host's files are read under `VRAM_IMEX_ROOT` (default `/`):
 * a container that mounts the host's /proc or /dev elsewhere points it there, and the tests plant
 * the files in a folder of their own.
 */
import { closeSync, openSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Device } from '../device.js';
import { CudaError, FabricUnavailableError } from '../errors.js';
import { absolutePath, variableReader } from '../util/environment.js';

/** `VRAM_IMEX_ROOT`: the folder the fabric check reads `proc/devices` and `dev/nvidia-caps-imex-channels/` under (default `/`). */
export const IMEX_ROOT_VARIABLE = variableReader('VRAM_IMEX_ROOT', absolutePath);

/** The character device the driver registers for IMEX channels, as /proc/devices names it. */
const IMEX_DEVICE = 'nvidia-caps-imex-channels';

/** What fabric memory is asked of: a stream-ordered pool (`AsyncResource`) or physical allocations (`PoolResource`). */
export type FabricUse = 'pool' | 'physical';

/**
 * Checks, in order, that `device` supports fabric handles (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED;
 * for a pool also the fabric bit of CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES), that
 * /proc/devices lists `nvidia-caps-imex-channels`, that /dev/nvidia-caps-imex-channels/ exists,
 * and that an IMEX channel in it (`channel0`, `channel1`, ...) opens for reading by this user.
 *
 * @param device The device whose memory would be shared.
 * @param use `pool` or `physical`.
 * @param what Who asks, for the message (`new AsyncResource`).
 * @throws {FabricUnavailableError} Naming the first requirement that fails and what to run.
 * @example
 * ```ts
 * checkFabricSupport(Device.get(0), 'pool', 'new AsyncResource');
 * ```
 */
export function checkFabricSupport(device: Device, use: FabricUse, what: string): void {
  const prefix = `${what}: fabric handles (CU_MEM_HANDLE_TYPE_FABRIC) on device ${device.ordinal}`;
  const supported = attribute(device, 'handleTypeFabricSupported', prefix);
  if (supported === 0) {
    throw new FabricUnavailableError(
      'device-attribute',
      `${prefix}: the device does not support them (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0); ` +
        "fabric memory needs a GPU of an NVLink domain (NVSwitch); use handleTypes: 'posix-fd' to share memory between processes of one host",
    );
  }
  if (use === 'pool' && (attribute(device, 'mempoolSupportedHandleTypes', prefix) & 0x8) === 0) {
    throw new FabricUnavailableError(
      'device-attribute',
      `${prefix}: its stream-ordered pools do not take them (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES lacks CU_MEM_HANDLE_TYPE_FABRIC, 0x8); ` +
        "a PoolResource's physical memory may (new PoolResource({ handleTypes: 'fabric' }))",
    );
  }
  const root = IMEX_ROOT_VARIABLE.read() ?? '/';
  const procDevices = path.join(root, 'proc/devices');
  const major = imexMajor(procDevices);
  if (major === undefined) {
    throw new FabricUnavailableError(
      'proc-devices',
      `${prefix}: ${procDevices} lists no ${IMEX_DEVICE} device, which IMEX channels are made from: the NVIDIA kernel module ` +
        'is not loaded or predates IMEX channels; load it (sudo nvidia-modprobe) or install a driver that has them',
    );
  }
  const channels = path.join(root, 'dev', IMEX_DEVICE);
  const create =
    `sudo nvidia-modprobe -s -i 0:1, or sudo mkdir -p ${channels} && sudo mknod -m 666 ${path.join(channels, 'channel0')} c ${major} 0 ` +
    `(${major}: the major number of ${IMEX_DEVICE} in ${procDevices}), or load the driver with NVreg_CreateImexChannel0=1`;
  if (!isDirectory(channels)) {
    throw new FabricUnavailableError(
      'channel-directory',
      `${prefix}: there is no ${channels}/, so no IMEX channel; channels are made by the administrator: ${create}`,
    );
  }
  const names = readdirSync(channels)
    .filter((name) => /^channel\d+$/.test(name))
    .sort((a, b) => Number(a.slice(7)) - Number(b.slice(7)));
  const refused: string[] = [];
  for (const name of names) {
    const why = openFailure(path.join(channels, name));
    if (why === undefined) return;
    refused.push(`${name}: ${why}`);
  }
  throw new FabricUnavailableError(
    'channel',
    `${prefix}: no IMEX channel in ${channels}/ that this user can open (${refused.length === 0 ? 'the folder has none' : refused.join(', ')}); ` +
      `ask the administrator for one: ${create}${refused.length === 0 ? '' : `, or let this user read ${refused.map((r) => r.split(':')[0]).join(', ')}`}`,
  );
}

/** A device attribute; a driver that does not know it (older than the fabric handle type) supports none. */
function attribute(device: Device, name: 'handleTypeFabricSupported' | 'mempoolSupportedHandleTypes', prefix: string): number {
  try {
    return device.attribute(name);
  } catch (error) {
    if (error instanceof CudaError) {
      throw new FabricUnavailableError(
        'device-attribute',
        `${prefix}: the driver does not know CU_DEVICE_ATTRIBUTE_${name === 'handleTypeFabricSupported' ? 'HANDLE_TYPE_FABRIC_SUPPORTED' : 'MEMPOOL_SUPPORTED_HANDLE_TYPES'} ` +
          `(${error.errorName}): fabric handles need CUDA 12.3 or later`,
      );
    }
    throw error;
  }
}

/** The major number /proc/devices gives `nvidia-caps-imex-channels` (a character device); undefined when the file or the line is missing. */
function imexMajor(file: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  // Character devices are listed first, block devices after their own heading.
  const characterDevices = text.split(/^Block devices:/m)[0] ?? '';
  const match = new RegExp(`^\\s*(\\d+)\\s+${IMEX_DEVICE}\\s*$`, 'm').exec(characterDevices);
  return match === null ? undefined : Number(match[1]);
}

function isDirectory(folder: string): boolean {
  try {
    return statSync(folder).isDirectory();
  } catch {
    return false;
  }
}

/** Why `file` does not open for reading by this process (its error code), or undefined when it does. */
function openFailure(file: string): string | undefined {
  try {
    closeSync(openSync(file, 'r'));
    return undefined;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code ?? String(error);
  }
}
