/**
 * Chooses the process-wide backend: `VRAM_BACKEND=cuda|emulated|auto` (default auto: the real
 * driver when it loads and reports a device, else the emulated backend).
 *
 * The choice is fixed once the first `Device` exists: every device, stream, buffer and resource
 * made from then on holds that backend's handles and addresses, which mean nothing to another
 * backend. `device.ts` tells this module when that happens (`claimBackend`); this module does not
 * import `device.ts`, so the layering stays one-way.
 */
import type { Backend } from './backend.js';
import { loadCudaBackend } from './cuda.js';
import { EmulatedBackend } from './emulated/emulated-backend.js';
import { VramStateError } from '../errors.js';
import { choiceOf, variableReader } from '../util/environment.js';

/** `VRAM_BACKEND`: which backend the process runs on (read when the backend is first needed). */
export const BACKEND_VARIABLE = variableReader('VRAM_BACKEND', choiceOf(['cuda', 'emulated', 'auto'] as const));

let current: Backend | undefined;
let autoFallbackReason: string | undefined;
/** False once the fallback warning was given, or a caller said it shows the reason itself. */
let fallbackWarningDue = true;
/** True once a Device was made on `current`: from then on it may not be replaced. */
let claimed = false;

/**
 * The process-wide backend, chosen from `VRAM_BACKEND` on first use. Code that has a Device, a
 * buffer or a resource should use its `backend` instead: that is the backend its handles belong to.
 *
 * @returns The backend.
 * @throws {RangeError} When `VRAM_BACKEND` names no backend.
 * @example
 * ```ts
 * console.log(getBackend().name); // 'cuda' or 'emulated'
 * ```
 */
export function getBackend(): Backend {
  if (current === undefined) current = chooseBackend(BACKEND_VARIABLE.read() ?? 'auto');
  return current;
}

/**
 * Replaces the process-wide backend (tests, or a program that wants an emulated device). Only
 * before the first `Device` exists (`Device.get`, and everything that allocates, makes one):
 * afterwards devices, streams and buffers hold handles of the backend in use, so a different one
 * is refused. Passing the backend already in use is allowed and changes nothing.
 *
 * @param backend The backend every later Device uses.
 * @throws {TypeError} When `backend` is not an object.
 * @throws {VramStateError} When a Device already exists and `backend` is not the one in use.
 * @example
 * ```ts
 * import { Device } from 'vram';
 * import { EmulatedBackend, setBackend } from 'vram/backend';
 * setBackend(new EmulatedBackend({ deviceCount: 2 })); // first thing in the program
 * const second = Device.get(1);
 * ```
 */
export function setBackend(backend: Backend): void {
  if (backend === null || typeof backend !== 'object') {
    throw new TypeError(`setBackend expects a Backend, got ${backend === null ? 'null' : typeof backend}`);
  }
  if (claimed && backend !== current) {
    throw new VramStateError(
      `setBackend: devices already exist on the ${current?.name ?? 'current'} backend, and their contexts, ` +
        'streams and memory belong to it; call setBackend before the first Device.get or allocation',
    );
  }
  current = backend;
}

/**
 * The backend, marked in use: `Device.get` calls it when it makes a device, after which
 * `setBackend` refuses another backend. Internal to vram (not exported from the package).
 *
 * @returns The backend the new device is driven by.
 * @throws {RangeError} When `VRAM_BACKEND` names no backend.
 * @example
 * ```ts
 * const backend = claimBackend(); // in Device.get, before `new Device(ordinal, backend)`
 * ```
 */
export function claimBackend(): Backend {
  const backend = getBackend();
  claimed = true;
  return backend;
}

/**
 * Why `auto` fell back to the emulated backend, if it did.
 *
 * @returns The reason, or undefined when the driver was chosen (or no choice was made yet).
 * @example
 * ```ts
 * const why = backendFallbackReason(); // e.g. 'libcuda.so.1: cannot open shared object file'
 * ```
 * @throws Never.
 */
export function backendFallbackReason(): string | undefined {
  return autoFallbackReason;
}

function chooseBackend(choice: 'cuda' | 'emulated' | 'auto'): Backend {
  switch (choice) {
    case 'cuda':
      return loadCudaBackend();
    case 'emulated':
      return new EmulatedBackend();
    case 'auto':
      try {
        const cuda = loadCudaBackend();
        if (cuda.deviceCount() > 0) return cuda;
        autoFallbackReason = 'the CUDA driver reports no device';
      } catch (error) {
        autoFallbackReason = error instanceof Error ? error.message : String(error);
      }
      warnFallback(autoFallbackReason);
      return new EmulatedBackend();
  }
}

/**
 * A program that meant to run on a GPU must not run on host memory unannounced (CuPy and PyTorch
 * fail loudly): `auto` says once per process that it fell back, and why. Choosing
 * `VRAM_BACKEND=emulated` says the user knows, so that path never warns.
 */
function warnFallback(reason: string): void {
  if (!fallbackWarningDue) return;
  fallbackWarningDue = false;
  process.emitWarning(
    // The reason is a sentence of its own (the loader's ends with a period): one full stop, not two.
    `vram runs on the emulated backend (host memory, no GPU): ${reason.replace(/[.\s]+$/, '')}. ` +
      'Set VRAM_BACKEND=emulated to choose it without this warning, or VRAM_BACKEND=cuda to make a missing driver an error.',
    { code: FALLBACK_WARNING_CODE },
  );
}

/** The code of the warning `auto` gives when it falls back to the emulated backend. */
export const FALLBACK_WARNING_CODE = 'VRAM_EMULATED_FALLBACK';

/**
 * Tells the backend choice that the caller shows the backend and its fallback reason itself
 * (`vram info` and `vram bench` head their output with it), so `auto` gives no warning as well.
 * Internal to vram (not exported from the package).
 *
 * @example
 * ```ts
 * showsFallbackItself(); // before the first getBackend()
 * ```
 * @throws Never.
 */
export function showsFallbackItself(): void {
  fallbackWarningDue = false;
}
