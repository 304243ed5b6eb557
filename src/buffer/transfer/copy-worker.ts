/**
 * A copy thread (see copy-threads.ts): takes jobs from the shared ring in order and runs each as
 * one native `memcpy`, then counts it done on its batch and wakes whoever waits for the batch.
 * It never touches JavaScript memory: jobs are addresses, the main thread keeps the memory alive.
 */
import { workerData } from 'node:worker_threads';
import { hostMemcpy } from '../../cuda/host-memcpy.js';
import { Ring, type RingBuffers } from './copy-ring.js';

const ring = new Ring(workerData as RingBuffers);
const memcpy = hostMemcpy();
ring.ready();
for (;;) {
  const job = ring.take();
  if (job < 0) break;
  memcpy(ring.dst(job), ring.src(job), ring.bytes(job));
  ring.done(job);
}
