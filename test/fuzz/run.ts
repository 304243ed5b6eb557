/**
 * `npm run fuzz`: seeded random operations, a million or more per target, on whichever backend
 * VRAM_BACKEND selects (auto: the GPU when there is one, else the emulated device).
 *
 * Four fuzzes, and by default all run:
 * - model (allocator-model.ts): allocate / free / bad input / releaseCached on several streams
 *   against a bookkeeping model (no overlap, alignment, statistics, everything returned), checked
 *   after every step, for the sub-allocators.
 * - data (data-fuzz.ts, targets in resources.ts): every resource and adaptor stack; fills every
 *   block with a byte pattern on its stream, moves blocks between streams through events, frees on
 *   streams, releases caches, rebuilds the stack, and reads the blocks back now and then: a resource
 *   that hands memory to a stream before the work of the stream that freed it is ordered before it
 *   fails with a data mismatch.
 * - full (data-fuzz.ts's runDataFuzzAsync with every operation, same targets): the data fuzz plus
 *   staged asynchronous copies and pinned-pool host buffers freed while a copy uses them, resources
 *   nested over the target and destroyed at random with blocks live (no two live blocks may share a
 *   byte), writes into read-only imports (each must be refused, the data unchanged) and built-in
 *   operations whose output overlaps their inputs (checked against NumPy's as-if-copied result).
 * - mixed (mixed-fuzz.ts): where capabilities meet, on the current resource: plain and spillable
 *   arrays on four streams, built-in ops and a user kernel, graphs captured, launched, updated and
 *   destroyed, DLPack round trips, budgets, memory pressure and frees, ForeignMirrors written from
 *   both sides (a capture of one refused), every value checked. Two
 *   targets: the compositions that work today, and all of them (spillable arrays in graphs,
 *   exports and budgets: issue 33 items 1-3).
 *
 * Usage:
 *   node dist/test/fuzz/run.js [--model] [--data] [--full] [--mixed] [--ops N] [--runs N] [--seed S] [--only NAME] [--list]
 *   npm run fuzz -- --full --ops 1000000
 *
 *   --model / --data / --full / --mixed  run only those fuzzes (default: all four)
 *   --ops N           operations per target (every target of every fuzz), split over the runs (default 1000000)
 *   --runs N          runs per target, each with its own random seed (default 4)
 *   --seed S          one run with this seed (0 to 4294967295): the replay of a failure
 *   --only NAME       only the target named NAME exactly, else those whose names contain it
 *                     (case-insensitive)
 *   --list            print the targets and exit
 *   --help            print this and exit
 *
 * Every run's seed is printed before it starts; a failure prints its seed, the step and a replay
 * command. Exit status: 0 when every run passed, 1 when one failed, 2 for bad arguments.
 */
import { parseArgs } from 'node:util';
import { getBackend } from '../../src/backend/select.js';
import { FuzzFailure, factories, runModel } from './allocator-model.js';
import { ALL_OPERATIONS, DataFuzzFailure, replayAsyncCommand, replayCommand, runDataFuzz, runDataFuzzAsync } from './data-fuzz.js';
import { resourceFactories } from './resources.js';
import { MIXED_TARGETS, MixedFuzzFailure, mixedReplayCommand, runMixedFuzz, type MixedTarget } from './mixed-fuzz.js';

const USAGE = `usage: node dist/test/fuzz/run.js [--model] [--data] [--full] [--mixed] [--ops N] [--runs N] [--seed S] [--only NAME] [--list]

  --model / --data / --full  run only the bookkeeping fuzz / the data fuzz / the data fuzz with
                    every operation (copies, nested resources, read-only imports, overlapping
                    views); --mixed: spillable arrays, graphs, DLPack, budgets and frees on
                    several streams together; any combination (default: all four)
  --ops N           operations per target of each fuzz, split over the runs (default 1000000)
  --runs N          runs per target, each with its own random seed (default 4)
  --seed S          one run with this seed (0 to 4294967295), to replay a failure
  --only NAME       only the target named NAME exactly, else the targets whose names contain it
  --list            print the targets of the selected fuzzes and exit
  --help            print this and exit

Exit status: 0 all runs passed, 1 a run failed (its seed and a replay command are printed), 2 bad arguments.`;

/** One fuzz the runner can run: its targets and how to run one of them. */
interface Fuzz {
  readonly name: 'model' | 'data' | 'full' | 'mixed';
  readonly targets: readonly string[];
  /** Runs one seed; returns a failure message (with the seed and a replay command), or undefined when it passed. */
  run(target: string, seed: number, ops: number): Promise<string | undefined>;
}

/** The message of a failure that is not the fuzz's own (its own names the seed and the replay). */
function unexpected(target: string, seed: number, error: unknown, replay: string): string {
  return `${target}: seed ${seed}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n  replay: ${replay}`;
}

const fuzzes: readonly Fuzz[] = [
  {
    name: 'model',
    targets: factories.map((f) => f.name),
    run(target, seed, ops) {
      const f = factories.find((x) => x.name === target)!;
      try {
        // Every invariant is checked after every step.
        runModel(f, { seed, ops, maxLive: 256 });
        return Promise.resolve(undefined);
      } catch (error) {
        const replay = `VRAM_BACKEND=${getBackend().name} node dist/test/fuzz/run.js --model --only '${target}' --seed ${seed} --ops ${ops}`;
        return Promise.resolve(error instanceof FuzzFailure ? `${error.message}\n  replay: ${replay}` : unexpected(target, seed, error, replay));
      }
    },
  },
  {
    name: 'data',
    targets: resourceFactories.map((f) => f.name),
    run(target, seed, ops) {
      const f = resourceFactories.find((x) => x.name === target)!;
      try {
        runDataFuzz(f, { seed, ops });
        return Promise.resolve(undefined);
      } catch (error) {
        return Promise.resolve(error instanceof DataFuzzFailure ? error.message : unexpected(target, seed, error, replayCommand(target, seed, ops)));
      }
    },
  },
  {
    name: 'full',
    targets: resourceFactories.map((f) => f.name),
    async run(target, seed, ops) {
      const f = resourceFactories.find((x) => x.name === target)!;
      try {
        await runDataFuzzAsync(f, { seed, ops, ...ALL_OPERATIONS });
        return undefined;
      } catch (error) {
        return error instanceof DataFuzzFailure ? error.message : unexpected(target, seed, error, replayAsyncCommand(target, seed, ops));
      }
    },
  },
  {
    name: 'mixed',
    targets: Object.keys(MIXED_TARGETS),
    run(target, seed, ops) {
      try {
        runMixedFuzz(target, { seed, ops, ...MIXED_TARGETS[target as MixedTarget] });
        return Promise.resolve(undefined);
      } catch (error) {
        return Promise.resolve(error instanceof MixedFuzzFailure ? error.message : unexpected(target, seed, error, mixedReplayCommand(target, seed, ops)));
      }
    },
  },
];

/** A bad command line: the message and the usage go to stderr, exit status 2. */
class UsageError extends Error {}

interface Plan {
  readonly selected: ReadonlyArray<{ fuzz: Fuzz; targets: string[] }>;
  readonly ops: number;
  readonly runs: number;
  readonly seed: number | undefined;
  readonly list: boolean;
  readonly help: boolean;
}

function wholeNumber(text: string, flag: string, min: number, max: number): number {
  if (!/^\d+$/.test(text)) throw new UsageError(`${flag} must be a whole number, got '${text}'`);
  const n = Number(text);
  if (n < min || n > max) throw new UsageError(`${flag} must be from ${min} to ${max}, got ${text}`);
  return n;
}

function parse(argv: readonly string[]): Plan {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        model: { type: 'boolean' },
        data: { type: 'boolean' },
        full: { type: 'boolean' },
        mixed: { type: 'boolean' },
        seed: { type: 'string' },
        ops: { type: 'string' },
        only: { type: 'string' },
        runs: { type: 'string' },
        list: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  if (values.help === true) return { selected: [], ops: 0, runs: 0, seed: undefined, list: false, help: true };
  const ops = values.ops === undefined ? 1_000_000 : wholeNumber(values.ops, '--ops', 1, Number.MAX_SAFE_INTEGER);
  const seed = values.seed === undefined ? undefined : wholeNumber(values.seed, '--seed', 0, 0xffffffff);
  let runs = values.runs === undefined ? 4 : wholeNumber(values.runs, '--runs', 1, 1_000_000);
  if (seed !== undefined) {
    if (values.runs !== undefined && runs !== 1) throw new UsageError('--seed replays one run: leave out --runs');
    runs = 1;
  }
  if (runs > ops) throw new UsageError(`--runs (${runs}) is more than --ops (${ops}): every run needs an operation`);
  const named = fuzzes.filter((f) => values[f.name] === true);
  const wanted = named.length > 0 ? named : fuzzes;
  const only = values.only;
  if (only !== undefined && only.trim() === '') throw new UsageError('--only needs a name');
  const all = wanted.flatMap((f) => f.targets);
  const exact = only !== undefined && all.includes(only);
  const selected = wanted
    .map((fuzz) => ({
      fuzz,
      targets: fuzz.targets.filter((t) => only === undefined || (exact ? t === only : t.toLowerCase().includes(only.toLowerCase()))),
    }))
    .filter((x) => x.targets.length > 0);
  if (selected.length === 0) {
    throw new UsageError(
      `--only '${only}' matches no target of the ${wanted.map((f) => f.name).join(' and ')} fuzz; targets:\n` +
        wanted.map((f) => f.targets.map((t) => `  ${f.name}: ${t}`).join('\n')).join('\n'),
    );
  }
  return { selected, ops, runs, seed, list: values.list === true, help: false };
}

async function main(argv: readonly string[]): Promise<number> {
  let plan: Plan;
  try {
    plan = parse(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`error: ${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (plan.help) {
    console.log(USAGE);
    return 0;
  }
  if (plan.list) {
    for (const { fuzz, targets } of plan.selected) for (const t of targets) console.log(`${fuzz.name}: ${t}`);
    return 0;
  }
  const perRun = Math.ceil(plan.ops / plan.runs);
  console.log(
    `backend ${getBackend().name}; ${plan.ops} operations per target in ${plan.runs} run(s) of ${perRun}` +
      (plan.seed !== undefined ? `, seed ${plan.seed}` : ', random seeds'),
  );
  let failures = 0;
  const t0 = performance.now();
  for (const { fuzz, targets } of plan.selected) {
    for (const target of targets) {
      const seeds = plan.seed !== undefined ? [plan.seed] : Array.from({ length: plan.runs }, () => (Math.random() * 2 ** 32) >>> 0);
      console.log(`${fuzz.name}: ${target}: seed(s) ${seeds.join(', ')}`);
      const t = performance.now();
      let failed = 0;
      for (const seed of seeds) {
        const message = await fuzz.run(target, seed, perRun);
        if (message !== undefined) {
          failed++;
          console.error(`FAIL ${fuzz.name}: ${message}`);
        }
      }
      failures += failed;
      console.log(
        `${fuzz.name}: ${target}: ${perRun * seeds.length} operations in ` +
          `${((performance.now() - t) / 1000).toFixed(1)} s${failed > 0 ? `, ${failed} FAILED run(s)` : ''}`,
      );
    }
  }
  console.log(`done in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  if (failures > 0) {
    console.error(`${failures} failing run(s)`);
    return 1;
  }
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
