/** Shared helpers for the suite, which runs on whichever backend VRAM_BACKEND selects. */
import { getBackend } from '../src/backend/select.js';

/** True when the suite runs on a real GPU (`npm run test:gpu`). */
export const onGpu: boolean = getBackend().name === 'cuda';

/** Options for a test that needs a real GPU: skipped, with the reason, on the emulated backend. */
export const gpuOnly = { skip: onGpu ? false : 'needs a real GPU (npm run test:gpu)' } as const;
