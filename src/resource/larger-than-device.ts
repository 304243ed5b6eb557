/**
 * What every device-memory resource says of a request larger than all of its device's memory: no
 * freeing, caching, waiting or address space can meet it, so the message says that rather than
 * blaming what ran out first (a pool's address range, one page, an upstream's chunk).
 */
import type { Device } from '../device.js';
import { formatBytesExact } from '../util/size.js';

/**
 * A device's memory in the words every message uses: `device 0's 80 GiB (85899345920 bytes) of memory`.
 *
 * @param device The device.
 * @returns The phrase.
 * @throws Never.
 * @example
 * ```ts
 * deviceMemoryWords(Device.get(0)); // "device 0's 4 GiB (4294967296 bytes) of memory" (emulated)
 * ```
 */
export function deviceMemoryWords(device: Device): string {
  return `device ${device.ordinal}'s ${formatBytesExact(device.info.totalMemory)} of memory`;
}

/**
 * Why `bytes` can never be allocated on `device`, when it is larger than all of its memory.
 *
 * @param device The device the memory would live on.
 * @param bytes The request (as rounded by the resource, or as asked).
 * @returns `it is larger than device 0's ... of memory`, or undefined when it is not larger.
 * @throws Never.
 * @example
 * ```ts
 * const why = largerThanDevice(Device.get(0), 2 ** 50); // 'it is larger than device 0's 4 GiB (4294967296 bytes) of memory'
 * ```
 */
export function largerThanDevice(device: Device, bytes: number): string | undefined {
  return bytes > device.info.totalMemory ? `it is larger than ${deviceMemoryWords(device)}` : undefined;
}
