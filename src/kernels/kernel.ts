/**
 * A kernel of a loaded module, with its declared signature: `launch` checks the configuration and
 * the arguments, writes them into the kernel's parameter block (made once, rewritten in place) and
 * launches; a driver error comes back naming the kernel. After the first launch a launch creates no
 * JavaScript objects of its own (the rest-parameter array and the config object are the caller's).
 */
import { captureError, capturing, refuseOnLegacyDuringCapture } from '../graphs/sessions.js';
import type { Backend, FunctionAttributes, Handle, KernelLimits, KernelParams } from '../backend/backend.js';
import { cacheConfigValue, type CacheConfig, type Device } from '../device.js';
import { CudaError, UseAfterFreeError } from '../errors.js';
import { Stream, streamHandleOf } from '../stream.js';
import { readLaunchConfig, type LaunchConfig } from './launch-config.js';
import type { Module } from './module.js';
import { maxActiveBlocks, suggestedBlockSize, type SuggestedBlockSize } from './occupancy.js';
import { writeArgs, type ArgsOf, type Signature } from './signature.js';
import { readOptions } from '../util/options.js';

/**
 * A launchable kernel: get one from `Module.kernel(name, signature)`.
 *
 * @example
 * ```ts
 * const saxpy = mod.kernel('saxpy', ['ptr', 'ptr', 'f32', 'u32'] as const);
 * saxpy.launch({ grid: Math.ceil(n / 256), block: 256 }, y, x, 2.0, n);
 * ```
 */
export class Kernel<S extends Signature> {
  /** The name it was asked for by (a name expression for templates). */
  readonly name: string;
  /** The module it belongs to (kept alive by the kernel). */
  readonly module: Module;
  /** The declared parameter types. */
  readonly signature: S;
  /** The kernel's attributes (registers, shared memory, its own block-size ceiling), read once. */
  readonly attributes: FunctionAttributes;
  readonly #device: Device;
  readonly #backend: Backend;
  readonly #context: Handle;
  readonly #fn: Handle;
  readonly #params: KernelParams;
  readonly #limits: KernelLimits;
  /** [gx, gy, gz, bx, by, bz] of the launch being checked: reused, so a launch allocates nothing. */
  readonly #dims = [1, 1, 1, 1, 1, 1];

  /** @internal Made by Module.kernel. */
  constructor(module: Module, name: string, signature: S, fn: Handle, context: Handle) {
    this.module = module;
    this.name = name;
    this.signature = signature;
    this.#device = module.device;
    this.#backend = module.device.backend;
    this.#context = context;
    this.#fn = fn;
    this.#backend.contextSetCurrent(context);
    this.attributes = Object.freeze({ ...this.#backend.functionAttributes(fn) });
    this.#limits = this.#backend.kernelLimits(module.device.ordinal);
    this.#params = this.#backend.kernelParams(signature);
  }

  /**
   * Launches the kernel: the grid, block and shared memory are checked against the device's limits
   * and the kernel's, the arguments against the signature, all before the driver is called. The
   * launch is asynchronous on `config.stream` (the legacy default stream when omitted); on the
   * emulated backend the kernel's JavaScript runs in that stream's order.
   *
   * @param config Grid, block, dynamic shared memory and stream.
   * @param args One argument per declared parameter.
   * @throws {TypeError} For a wrong argument count or kind, or a malformed configuration.
   * @throws {RangeError} For a grid or block of zero or beyond the device's limits, too many threads
   *   per block, too much shared memory, an integer out of range, or memory another device holds.
   * @throws {UseAfterFreeError} When the module was destroyed, or memory or the stream freed.
   * @throws {CudaError} When the driver refuses the launch (its message names the kernel).
   * @example
   * ```ts
   * kernel.launch({ grid: [64, 64], block: [16, 16], stream }, image, width, height);
   * ```
   */
  launch(config: LaunchConfig, ...args: ArgsOf<S>): void {
    if (this.module.destroyed) throw new UseAfterFreeError(`kernel ${this.name}: its module was destroyed`);
    config = readOptions('Kernel.launch', config, { grid: true, block: true, sharedBytes: true, stream: true }, 'config');
    const dims = this.#dims;
    const shared = readLaunchConfig(this.name, config, this.#limits, this.attributes, dims);
    const stream = config.stream;
    if (stream instanceof Stream && stream.device !== this.#device) {
      throw new RangeError(`kernel ${this.name}: the stream belongs to device ${stream.device.ordinal}, the kernel to device ${this.#device.ordinal}`);
    }
    const handle = streamHandleOf(stream);
    if (handle === 0 && capturing()) refuseOnLegacyDuringCapture(`kernel ${this.name}: launch()`, 'a launch on the legacy default stream');
    writeArgs(this.name, this.#device, this.#params, args, stream);
    const backend = this.#backend;
    backend.contextSetCurrent(this.#context);
    try {
      backend.launchKernel(this.#fn, dims[0]!, dims[1]!, dims[2]!, dims[3]!, dims[4]!, dims[5]!, shared, handle, this.#params);
    } catch (error) {
      // The driver's refusal during a capture (an invalidated capture, the legacy stream beside one) names the launch.
      throw captureError(withKernelName(this.name, error), `kernel ${this.name}: launch()`);
    }
  }

  /**
   * How many blocks of `blockSize` threads can be resident on one multiprocessor at once.
   *
   * @param blockSize Threads per block.
   * @param sharedBytes Dynamic shared memory per block (default 0).
   * @returns Resident blocks per multiprocessor.
   * @throws {RangeError} For a block size outside 1..attributes.maxThreadsPerBlock or bad shared memory.
   * @throws {UseAfterFreeError} When the module was destroyed.
   * @example
   * ```ts
   * kernel.maxActiveBlocksPerMultiprocessor(256); // e.g. 8 on an H100 for a light kernel
   * ```
   */
  maxActiveBlocksPerMultiprocessor(blockSize: number, sharedBytes = 0): number {
    this.#checkLive();
    this.#backend.contextSetCurrent(this.#context);
    return maxActiveBlocks(this.name, this.#backend, this.#fn, this.attributes, blockSize, sharedBytes);
  }

  /**
   * The block size that keeps the most threads resident, and the grid that fills the device with it.
   *
   * @param sharedBytes Dynamic shared memory per block (default 0).
   * @param blockSizeLimit The largest block size to consider (default 0: the kernel's maximum).
   * @returns `{ blockSize, minGridSize }`.
   * @throws {RangeError} For bad shared memory or limit.
   * @throws {UseAfterFreeError} When the module was destroyed.
   * @example
   * ```ts
   * const { blockSize } = kernel.suggestedBlockSize();
   * kernel.launch({ grid: Math.ceil(n / blockSize), block: blockSize }, out, n);
   * ```
   */
  suggestedBlockSize(sharedBytes = 0, blockSizeLimit = 0): SuggestedBlockSize {
    this.#checkLive();
    this.#backend.contextSetCurrent(this.#context);
    return suggestedBlockSize(this.name, this.#backend, this.#fn, this.attributes, sharedBytes, blockSizeLimit);
  }

  /**
   * Sets this kernel's preferred split between L1 cache and shared memory (cuFuncSetCacheConfig);
   * `'prefer-none'` leaves it to the context's (`ctx.setCacheConfig`). A preference: the driver
   * may choose otherwise, and devices with a fixed split ignore it.
   *
   * @param config `'prefer-none'`, `'prefer-shared'`, `'prefer-l1'` or `'prefer-equal'`.
   * @throws {RangeError} For another value.
   * @throws {UseAfterFreeError} When the module was destroyed.
   * @throws {CudaError} When the driver refuses.
   * @example
   * ```ts
   * kernel.setCacheConfig('prefer-shared'); // a kernel that stages tiles in shared memory
   * ```
   */
  setCacheConfig(config: CacheConfig): void {
    const value = cacheConfigValue(config);
    this.#checkLive();
    this.#backend.contextSetCurrent(this.#context);
    this.#backend.functionSetCacheConfig(this.#fn, value);
  }

  /**
   * A short description for logs; it reads no driver state, so it works after the module is destroyed.
   *
   * @returns `Kernel(saxpy on Device(0: ...))`: the kernel's name and its device.
   * @throws Never.
   * @example
   * ```ts
   * console.log(String(saxpy)); // Kernel(saxpy on Device(0: ...))
   * ```
   */
  toString(): string {
    return `Kernel(${this.name} on ${String(this.#device)})`;
  }

  #checkLive(): void {
    if (this.module.destroyed) throw new UseAfterFreeError(`kernel ${this.name}: its module was destroyed`);
  }
}

/** The driver's error for a launch, with the kernel's name in its description (other errors unchanged). */
function withKernelName(kernel: string, error: unknown): unknown {
  if (!(error instanceof CudaError)) return error;
  const prefix = `${error.call} failed: ${error.errorName} (${error.code})`;
  const description = error.message.startsWith(`${prefix}: `) ? error.message.slice(prefix.length + 2) : '';
  const named = new CudaError(error.code, error.errorName, error.call, `kernel ${kernel}${description ? `: ${description}` : ''}`);
  Object.defineProperty(named, 'cause', { value: error, enumerable: false, writable: true, configurable: true });
  return named;
}
