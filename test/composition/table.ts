/**
 * The composition contract: for every kind of memory (kinds.ts) and every consumer
 * (consumers.ts), what must happen. `works`: the data round-trips, as the consumer checks. A
 * refusal: the consumer's use throws that error class with that message fragment, before harm.
 * test/composition.test.ts runs every cell and fails while a pair has no cell here.
 *
 * `todo` marks a cell that fails today only because of a known bug (issue 33's numbered items),
 * reported by node:test as TODO, not as a failure; the cell still states the intended outcome,
 * and the marker goes when the fix lands. `skip` is for cells this machine cannot run (peer
 * copies need two devices).
 */
import { InvalidPointerError, NotSupportedError, OutOfMemoryError, VramStateError } from '../../src/errors.js';
import { onGpu } from '../helpers.js';

/** An error class a refusal names. */
export type ErrorClass = abstract new (...args: never[]) => Error;

export type Outcome = { readonly expect: 'works' } | { readonly expect: 'refuses'; readonly error: ErrorClass; readonly message: RegExp };

export type Expectation = Outcome & { readonly todo?: string };

export const works: Expectation = Object.freeze({ expect: 'works' });

export function refuses(error: ErrorClass, message: RegExp): Expectation {
  return { expect: 'refuses', error, message };
}

/** `cell`, failing today because of issue 33's item `item`. */
export function todo(cell: Expectation, item: number | string): Expectation {
  return { ...cell, todo: `issue 33 item ${item}` };
}

/** `cell`, failing today because of a defect this table found that no issue item covers yet. */
export function finding(cell: Expectation, what: string): Expectation {
  return { ...cell, todo: `composition finding: ${what}` };
}

/** Host memory where a device array is expected: refused before any driver call. */
const notDevice = refuses(TypeError, /DeviceArray|device array|expects|not mapped/i);
/** A write into read-only memory. */
const readOnly = refuses(VramStateError, /read-only|read only|readOnly/i);
/** A budget one byte short of the allocation it charges. */
const overBudget = refuses(OutOfMemoryError, /budget/i);
/** Memory vram did not allocate cannot be exported by IPC. */
const notExportable = refuses(TypeError, /exportIpc expects a DeviceBuffer/);

/**
 * A spillable buffer cannot be shared with another process: a spill would take its memory (or,
 * for memory that moves, its address) from under the importer, which vram cannot follow.
 */
const notSpillable = refuses(NotSupportedError, /spillable/);
/**
 * DLPack of pinned memory that is not mapped: exported as a CUDA host tensor; imported back as a
 * device array only where the device can address it. The emulated backend maps pinned memory
 * only when asked ({ mapped: true }); a GPU with unified addressing maps every cuMemHostAlloc.
 */
const pinnedDLPack = onGpu ? works : refuses(InvalidPointerError, /not mapped/);
/**
 * A peer copy of spillable memory at a fixed address: its virtual range is mapped for its own
 * device only, and the copy grants the other device nothing (a PoolResource's does), so the
 * driver refuses the copy. Found by this table; see the report of the composition-table branch.
 */
const PEER_SPILLABLE = finding(works, 'a peer copy of fixed-address spillable memory fails in the driver (no access granted to the copying device)');

/** Row after row: kind -> consumer -> outcome. */
export const table: Readonly<Record<string, Readonly<Record<string, Expectation>>>> = {
  'pool-block': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': works,
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'adaptive-block': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': works,
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'async-resource': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': works,
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'cuda-resource': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': works,
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  managed: {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': refuses(NotSupportedError, /not memory vram can export/),
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  pinned: {
    'builtin-read': notDevice,
    'builtin-write': notDevice,
    'user-kernel': notDevice,
    'copy-js-sync': works,
    'copy-js-async': notDevice,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: notDevice,
    'dlpack-export': pinnedDLPack,
    'cai-export': notDevice,
    'ipc-export': notExportable,
    nccl: notDevice,
    budget: works,
    'scoped-resource': notDevice,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  mapped: {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notExportable,
    nccl: refuses(NotSupportedError, /NCCL takes device memory/),
    budget: works,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'spillable-fixed': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': PEER_SPILLABLE,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notSpillable,
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'spillable-moving': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notSpillable,
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  foreign: {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notExportable,
    nccl: works,
    budget: works,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'read-only-view': {
    'builtin-read': works,
    'builtin-write': readOnly,
    'user-kernel': readOnly,
    'copy-js-sync': readOnly,
    'copy-js-async': readOnly,
    'copy-pinned': readOnly,
    'copy-device': readOnly,
    'copy-peer': readOnly,
    graph: readOnly,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notExportable,
    nccl: readOnly,
    budget: works,
    'scoped-resource': works,
    spilling: readOnly,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'ipc-import': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notExportable,
    nccl: works,
    budget: works,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'dlpack-import': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notExportable,
    nccl: works,
    budget: works,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'cai-import': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': notExportable,
    nccl: works,
    budget: works,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
  'graph-private': {
    'builtin-read': works,
    'builtin-write': works,
    'user-kernel': works,
    'copy-js-sync': works,
    'copy-js-async': works,
    'copy-pinned': works,
    'copy-device': works,
    'copy-peer': works,
    graph: works,
    'dlpack-export': works,
    'cai-export': works,
    'ipc-export': refuses(NotSupportedError, /graph-private/),
    nccl: works,
    budget: overBudget,
    'scoped-resource': works,
    spilling: works,
    'stats-snapshot': works,
    free: works,
    using: works,
    backstop: works,
  },
};
