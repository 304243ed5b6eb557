/**
 * RMM's random-allocations benchmark pattern, seeded so every run and every resource sees the same
 * sequence: up to N allocations of uniformly random sizes in [1, max], each step allocating with
 * probability 73% (while under the allocation count and the usage cap) or else freeing a random
 * live block; whatever is left is freed at the end.
 */
import type { MemoryResource } from '../../resource/resource.js';
import type { StreamRef } from '../../stream.js';
import type { Ptr } from '../../backend/backend.js';
import { mulberry32 } from '../../util/random.js';

/** The pattern's parameters. */
export interface RandomPattern {
  readonly allocations: number;
  readonly maxSize: number;
  /** Live bytes never exceed this. */
  readonly maxUsage: number;
  readonly seed: number;
}

/** RMM's allocation probability, in percent. */
const ALLOCATE_PERCENT = 73;

/** Runs the pattern on `mr` and returns how many operations (allocations + frees) it performed. */
export function runRandomAllocations(mr: MemoryResource, pattern: RandomPattern, stream?: StreamRef): number {
  const random = mulberry32(pattern.seed);
  const ptrs: Ptr[] = [];
  const sizes: number[] = [];
  let live = 0;
  let allocated = 0;
  let operations = 0;
  for (let i = 0; i < pattern.allocations * 2; i++) {
    const size = 1 + Math.floor(random() * pattern.maxSize);
    let allocate = true;
    if (ptrs.length > 0) {
      allocate = random() * 100 < ALLOCATE_PERCENT && allocated < pattern.allocations && live + size < pattern.maxUsage;
    }
    if (allocate) {
      ptrs.push(mr.allocate(size, stream));
      sizes.push(size);
      live += size;
      allocated += 1;
    } else {
      // Swap-remove a random live block: O(1), and the order of frees stays random.
      const index = Math.floor(random() * ptrs.length);
      const last = ptrs.length - 1;
      mr.deallocate(ptrs[index]!, sizes[index]!, stream);
      live -= sizes[index]!;
      ptrs[index] = ptrs[last]!;
      sizes[index] = sizes[last]!;
      ptrs.pop();
      sizes.pop();
    }
    operations += 1;
  }
  for (let i = 0; i < ptrs.length; i++) mr.deallocate(ptrs[i]!, sizes[i]!, stream);
  return operations + ptrs.length;
}
