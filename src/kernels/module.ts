/**
 * A module of device code loaded into a device's context: compiled at run time from CUDA C++
 * (`Module.compile`, through NVRTC and the disk cache), or loaded from PTX or a CUBIN built
 * elsewhere (`fromPtx`, `fromCubin`, no NVRTC needed). Its kernels are launched through
 * `mod.kernel(name, signature)`.
 *
 * On the emulated backend there is no device code to run: a module is the JavaScript functions
 * given as `emulated` (one per kernel, by the name `kernel()` is asked for), `compile` does not
 * call NVRTC, and a kernel without a JavaScript implementation cannot be used there.
 *
 * Lifetime: `destroy()` (or `using`) unloads the module; a module dropped without it is unloaded
 * by a FinalizationRegistry backstop once neither it nor any of its kernels is reachable.
 */
import type { EmulatedKernels, Handle, ModuleImage } from '../backend/backend.js';
import { Device } from '../device.js';
import { relaxedDuringCapture } from '../graphs/sessions.js';
import { CudaError, CUresult, NotSupportedError, UseAfterFreeError } from '../errors.js';
import { compileSource } from './compile.js';
import { Kernel } from './kernel.js';
import { checkSignature, type Signature } from './signature.js';
import { readOptions } from '../util/options.js';

/** Options of `Module.fromPtx` and `Module.fromCubin`. */
export interface LoadOptions {
  /** The device whose context loads it (default device 0). */
  readonly device?: Device | number;
  /** JavaScript implementations the emulated backend runs, by kernel name (ignored on a GPU). */
  readonly emulated?: EmulatedKernels;
}

/** Options of `Module.compile`. */
export interface CompileOptions extends LoadOptions {
  /** NVRTC options, e.g. `['-DN=4', '--use_fast_math']`; the device's architecture is added unless one is given. */
  readonly options?: readonly string[];
  /** C++ name expressions whose kernels `kernel()` finds by that expression (templates: `'sum<float>'`). */
  readonly nameExpressions?: readonly string[];
  /** Headers the source may `#include`, by include name. */
  readonly headers?: Readonly<Record<string, string>>;
  /** Use the disk compile cache (default true): `VRAM_CACHE_DIR`, else the user cache folder. */
  readonly cache?: boolean;
}

/** What the backstop needs to unload a lost module (never the module itself). */
interface Held {
  readonly device: Device;
  readonly context: Handle;
  readonly handle: Handle;
}

const registry = new FinalizationRegistry<Held>((held) => {
  try {
    held.device.backend.contextSetCurrent(held.context);
    held.device.backend.moduleUnload(held.handle);
  } catch {
    // The context may be gone (and the module with it); nothing else can be done from a GC callback.
  }
});

/**
 * Loaded device code.
 *
 * @example
 * ```ts
 * using mod = Module.compile(`
 *   extern "C" __global__ void scale(float *v, float a, unsigned n) {
 *     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
 *     if (i < n) v[i] *= a;
 *   }`, { emulated: { scale: scaleInJavaScript } });
 * const scale = mod.kernel('scale', ['ptr', 'f32', 'u32'] as const);
 * scale.launch({ grid: Math.ceil(n / 256), block: 256 }, v, 2, n);
 * ```
 */
export class Module {
  /** The device whose context holds the module. */
  readonly device: Device;
  /** NVRTC's log of the compile ('' when loaded from PTX/CUBIN, taken from the cache, or emulated). */
  readonly log: string;
  readonly #handle: Handle;
  readonly #context: Handle;
  readonly #loweredNames: Readonly<Record<string, string>>;
  readonly #emulated: EmulatedKernels | undefined;
  readonly #held: Held;
  readonly #functions = new Map<string, Handle>();
  #destroyed = false;

  private constructor(
    device: Device,
    context: Handle,
    handle: Handle,
    log: string,
    loweredNames: Readonly<Record<string, string>>,
    emulated: EmulatedKernels | undefined,
  ) {
    this.device = device;
    this.log = log;
    this.#handle = handle;
    this.#context = context;
    this.#loweredNames = loweredNames;
    this.#emulated = emulated;
    this.#held = { device, context, handle };
    registry.register(this, this.#held, this.#held);
  }

  /**
   * Compiles CUDA C++ for the device's architecture with NVRTC (taking the image from the disk
   * cache when the same source, options, headers and name expressions were compiled before for
   * the same architecture, NVRTC and driver) and loads it. On the emulated backend NVRTC is not
   * called: the module's kernels are `options.emulated`.
   *
   * @param source CUDA C++ source. Kernels are found by name: declare them `extern "C"`, or give
   *   their C++ name expressions in `nameExpressions`.
   * @param options Device, NVRTC options, name expressions, headers, cache, emulated kernels.
   * @returns The loaded module.
   * @throws {TypeError} For a source or option of the wrong type.
   * @throws {CompileError} When NVRTC rejects the source (`error.log` says where).
   * @throws {NvrtcUnavailableError} On a GPU without NVRTC (the message says what to install).
   * @throws {CudaError} When the driver cannot load the compiled image.
   * @example
   * ```ts
   * const m = Module.compile('template <typename T> __global__ void fill(T *p, T v) { p[threadIdx.x] = v; }',
   *   { nameExpressions: ['fill<float>'], emulated: { 'fill<float>': fillFloat } });
   * const fill = m.kernel('fill<float>', ['ptr', 'f32'] as const);
   * ```
   */
  static compile(source: string, options: CompileOptions = {}): Module {
    if (typeof source !== 'string' || source.length === 0) throw new TypeError('Module.compile: the source must be a non-empty string');
    options = readOptions('Module.compile', options, { device: true, emulated: true, options: true, nameExpressions: true, headers: true, cache: true });
    const nvrtcOptions = stringList(options.options, 'options');
    const nameExpressions = stringList(options.nameExpressions, 'nameExpressions');
    const headers = headerTable(options.headers);
    const cache = options.cache ?? true;
    if (typeof cache !== 'boolean') throw new TypeError('Module.compile: cache must be a boolean');
    const emulated = emulatedTable(options.emulated);
    const device = Device.resolve(options.device);
    if (device.backend.kernelCode === 'javascript') {
      return Module.#load(device, { kind: 'ptx', data: new Uint8Array(0), emulated: emulated ?? {} }, '', {}, emulated);
    }
    const compiled = compileSource({
      source,
      options: nvrtcOptions,
      nameExpressions,
      headers,
      cache,
      computeCapability: device.info.computeCapability,
      driverVersion: device.backend.driverVersion(),
    });
    return Module.#load(device, { kind: compiled.kind, data: compiled.image }, compiled.log, compiled.loweredNames, emulated);
  }

  /**
   * Loads PTX (text) built elsewhere (nvcc -ptx, NVRTC, a file shipped with a package); the driver
   * compiles it for the device. No NVRTC needed.
   *
   * @param ptx The PTX, as text or its bytes.
   * @param options Device and emulated kernels.
   * @returns The loaded module.
   * @throws {TypeError} For a ptx that is not a non-empty string or Uint8Array.
   * @throws {CudaError} When the driver rejects the PTX (CUDA_ERROR_INVALID_PTX, CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
   * @example
   * ```ts
   * const m = Module.fromPtx(readFileSync('kernels.ptx', 'utf8'), { emulated: { scale } });
   * ```
   */
  static fromPtx(ptx: string | Uint8Array, options: LoadOptions = {}): Module {
    options = readOptions('Module.fromPtx', options, { device: true, emulated: true });
    const data = typeof ptx === 'string' ? new TextEncoder().encode(ptx) : ptx;
    if (!(data instanceof Uint8Array) || data.length === 0) throw new TypeError('Module.fromPtx: the PTX must be a non-empty string or Uint8Array');
    const emulated = emulatedTable(options.emulated);
    return Module.#load(Device.resolve(options.device), { kind: 'ptx', data, ...(emulated ? { emulated } : {}) }, '', {}, emulated);
  }

  /**
   * Loads a CUBIN (or fatbin) built for the device's architecture. No NVRTC needed.
   *
   * @param cubin The image's bytes.
   * @param options Device and emulated kernels.
   * @returns The loaded module.
   * @throws {TypeError} For a cubin that is not a non-empty Uint8Array.
   * @throws {CudaError} When the driver rejects the image (CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_NO_BINARY_FOR_GPU).
   * @example
   * ```ts
   * const m = Module.fromCubin(readFileSync('kernels.sm_90.cubin'));
   * ```
   */
  static fromCubin(cubin: Uint8Array, options: LoadOptions = {}): Module {
    options = readOptions('Module.fromCubin', options, { device: true, emulated: true });
    if (!(cubin instanceof Uint8Array) || cubin.length === 0) throw new TypeError('Module.fromCubin: the CUBIN must be a non-empty Uint8Array');
    const emulated = emulatedTable(options.emulated);
    return Module.#load(Device.resolve(options.device), { kind: 'cubin', data: cubin, ...(emulated ? { emulated } : {}) }, '', {}, emulated);
  }

  static #load(device: Device, image: ModuleImage, log: string, loweredNames: Readonly<Record<string, string>>, emulated: EmulatedKernels | undefined): Module {
    device.makeCurrent();
    const context = device.activeContext;
    // A built-in op's module may first be needed inside a capture: loading it orders nothing there.
    const handle = relaxedDuringCapture(device.backend, () => device.backend.moduleLoad(image));
    return new Module(device, context, handle, log, loweredNames, emulated);
  }

  /**
   * True once `destroy()` has run (the vocabulary: `destroy` ends it, `destroyed` says it ended; docs/architecture.md).
   *
   * @returns Whether it ended.
   * @example
   * ```ts
   * const m = Module.compile(source);
   * m.destroy();
   * m.destroyed; // true
   * ```
   */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * A kernel of the module with its parameter types, for launching.
   *
   * @param name An `extern "C"` kernel's name, a name expression given to `compile`, or a mangled name.
   * @param signature The kernel's parameters in order (`'ptr'`, scalars, `{ struct: [...] }`).
   * @returns The kernel.
   * @throws {TypeError} For a bad name or signature.
   * @throws {NotSupportedError} On the emulated backend, for a kernel with no JavaScript implementation.
   * @throws {CudaError} CUDA_ERROR_NOT_FOUND when the module has no such kernel.
   * @throws {UseAfterFreeError} When the module was destroyed.
   * @example
   * ```ts
   * const add = mod.kernel('add', ['ptr', 'ptr', 'ptr', 'u32'] as const);
   * ```
   */
  kernel<const S extends Signature>(name: string, signature: S): Kernel<S> {
    if (this.#destroyed) throw new UseAfterFreeError(`Module.kernel(${String(name)}): the module was destroyed`);
    if (typeof name !== 'string' || name.length === 0) throw new TypeError('Module.kernel: the name must be a non-empty string');
    const checked = checkSignature(signature, name);
    return new Kernel(this, name, checked, this.#functionHandle(name), this.#context);
  }

  #functionHandle(name: string): Handle {
    let fn = this.#functions.get(name);
    if (fn !== undefined) return fn;
    const backend = this.device.backend;
    if (backend.kernelCode === 'javascript' && (this.#emulated === undefined || !Object.hasOwn(this.#emulated, name))) {
      throw new NotSupportedError(
        `kernel ${name}: the emulated backend runs JavaScript in place of CUDA code, and this module has no ` +
          `JavaScript implementation of ${name}; pass one as { emulated: { '${name}': (launch) => { ... } } } when creating the module ` +
          '(see EmulatedLaunch: the decoded arguments and launch.memory.bytes(ptr, byteLength))',
      );
    }
    const lowered = Object.hasOwn(this.#loweredNames, name) ? this.#loweredNames[name]! : name;
    backend.contextSetCurrent(this.#context);
    try {
      fn = backend.moduleGetFunction(this.#handle, lowered);
    } catch (error) {
      if (error instanceof CudaError && error.code === CUresult.NOT_FOUND) {
        throw new CudaError(
          error.code,
          error.errorName,
          error.call,
          `the module has no kernel ${name}` +
            (name.includes('<') || name.includes('::')
              ? ' (give C++ names to Module.compile in nameExpressions)'
              : ' (declare it extern "C", or give its C++ name in nameExpressions)'),
        );
      }
      throw error;
    }
    this.#functions.set(name, fn);
    return fn;
  }

  /**
   * Unloads the module; its kernels can no longer be launched (work already queued completes).
   *
   * @throws {UseAfterFreeError} When already destroyed.
   * @throws {CudaError} When the driver fails to unload it.
   * @example
   * ```ts
   * mod.destroy();
   * ```
   */
  destroy(): void {
    if (this.#destroyed) throw new UseAfterFreeError('the module was already destroyed');
    this.#destroyed = true;
    registry.unregister(this.#held);
    this.device.backend.contextSetCurrent(this.#context);
    this.device.backend.moduleUnload(this.#handle);
  }

  /** `using module = Module.compile(...)` unloads it at the end of the scope. */
  [Symbol.dispose](): void {
    if (!this.#destroyed) this.destroy();
  }
}

function stringList(value: unknown, what: string): readonly string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw new TypeError(`Module.compile: ${what} must be an array of strings`);
  return Object.freeze([...value] as string[]);
}

function headerTable(value: unknown): Readonly<Record<string, string>> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new TypeError('Module.compile: headers must be an object of include name -> source');
  const table: Record<string, string> = {};
  for (const [name, source] of Object.entries(value)) {
    if (typeof source !== 'string') throw new TypeError(`Module.compile: header ${name} must be a string`);
    table[name] = source;
  }
  return Object.freeze(table);
}

function emulatedTable(value: unknown): EmulatedKernels | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new TypeError('emulated must be an object of kernel name -> function');
  for (const [name, fn] of Object.entries(value)) {
    if (typeof fn !== 'function') throw new TypeError(`emulated.${name} must be a function (launch) => void`);
  }
  return Object.freeze({ ...(value as EmulatedKernels) });
}
