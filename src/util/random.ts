/**
 * A seeded pseudo-random generator for the places that need a sequence they can reproduce: the
 * benchmark's random-allocations pattern (every run and every resource sees the same requests)
 * and the allocator fuzz tests (a failing run replays from its seed).
 */

/** mulberry32: small and fast, good enough for workloads; not for anything cryptographic. Returns values in [0, 1). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
