/**
 * Chooses the process-wide backend: `VRAM_BACKEND=cuda|emulated|auto` (default auto: the real
 * driver when it loads and reports a device, else the emulated backend).
 */
import type { Backend } from './backend.js';
import { loadCudaBackend } from './cuda.js';
import { EmulatedBackend } from './emulated.js';

let current: Backend | undefined;
let autoFallbackReason: string | undefined;

/** The backend every layer uses; chosen on first use. */
export function getBackend(): Backend {
  if (current === undefined) current = chooseBackend(process.env.VRAM_BACKEND ?? 'auto');
  return current;
}

/** Replaces the process-wide backend (tests, or a program that wants an emulated device). */
export function setBackend(backend: Backend): void {
  current = backend;
}

/** Why `auto` fell back to the emulated backend, if it did. */
export function backendFallbackReason(): string | undefined {
  return autoFallbackReason;
}

function chooseBackend(choice: string): Backend {
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
      return new EmulatedBackend();
    default:
      throw new RangeError(`VRAM_BACKEND must be cuda, emulated or auto, got '${choice}'`);
  }
}
