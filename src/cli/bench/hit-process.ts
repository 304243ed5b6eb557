/**
 * The process `measureHitsApart` (hits.ts) starts: builds the stack named in its one argument (a
 * `HitRequest` as JSON), times its hits with `measureHits` (or, asked for `objects`, the object
 * layer's pairs over it with `measureObjectPairs`), prints the figures as JSON, and ends
 * the stack. It holds nothing else, as bench/pool-hit's process does. A failure is one line on
 * stderr (the error's name and message) and exit status 1.
 */
import { Device } from '../../device.js';
import { createResourceStack } from '../../resource/stacks.js';
import { HIT_ROUNDS, measureHits, type HitRequest } from './hits.js';
import { measureObjectPairs } from './object-pairs.js';

try {
  const request = JSON.parse(process.argv[2] ?? '') as HitRequest;
  Device.get(0).makeCurrent();
  const stack = createResourceStack(request.stack, request.options);
  try {
    const figures =
      request.measure === 'objects'
        ? measureObjectPairs(stack.resource, request.sizes, request.rounds ?? HIT_ROUNDS)
        : measureHits(stack.resource, request.sizes, request.rounds);
    process.stdout.write(JSON.stringify(figures));
  } finally {
    stack.destroy();
  }
} catch (error) {
  process.stderr.write(`${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}\n`);
  process.exitCode = 1;
}
