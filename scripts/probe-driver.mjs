// Asks the real driver the questions where the emulated backend must give the same answers (errors
// of 0-byte and bad frees, destroyed streams and events, cuMemMap rules, calls without a context,
// free memory across allocations, the context stack). Not part of the suite; prints one JSON line
// per probe. The emulation follows what CUDA 13 answered on an H200. The last probes use destroyed
// contexts (undefined behaviour: the process may abort at exit).
// Usage on the GPU machine, after a build: scripts/gpu-run.sh exec node scripts/probe-driver.mjs
import { loadCudaBackend } from '../dist/src/backend/cuda.js';

const cuda = loadCudaBackend();
const MiB = 1 << 20;
const out = {};
function probe(name, fn) {
  try {
    const value = fn();
    out[name] = { ok: true, value };
  } catch (error) {
    out[name] = { ok: false, error: error?.errorName ?? String(error), call: error?.call, message: String(error?.message ?? error) };
  }
  console.log(JSON.stringify({ [name]: out[name] }));
}

probe('noctx.memGetInfo', () => cuda.memGetInfo());
probe('noctx.getCurrent', () => cuda.contextGetCurrent());
probe('noctx.memAlloc', () => cuda.memAlloc(4096));
probe('noctx.streamCreate', () => cuda.streamCreate(1, 0));
probe('noctx.eventCreate', () => cuda.eventCreate(2));
probe('noctx.granularity', () => cuda.memGetAllocationGranularity(0));
probe('noctx.defaultPool', () => cuda.deviceGetDefaultMemPool(0));
probe('noctx.poolCreate', () => {
  const p = cuda.memPoolCreate({ device: 0 });
  cuda.memPoolDestroy(p);
  return p !== 0;
});
probe('noctx.addressReserve', () => {
  const g = 2 * MiB;
  const va = cuda.memAddressReserve(g, 0);
  cuda.memAddressFree(va, g);
  return va !== 0;
});
probe('noctx.memCreate', () => {
  const h = cuda.memCreate(2 * MiB, 0);
  cuda.memRelease(h);
  return h !== 0;
});
probe('noctx.hostAlloc', () => {
  const h = cuda.memHostAlloc(4096, 0);
  cuda.memFreeHost(h);
  return true;
});
probe('noctx.pointerAttributes', () => cuda.pointerGetAttributes(0x1000));

const primary = cuda.primaryContextRetain(0);
cuda.contextSetCurrent(primary);
const free = () => cuda.memGetInfo().free;
const total = cuda.memGetInfo().total;
out.total = total;

// Stream-ordered allocation of 0 bytes, and frees of odd pointers.
const s = cuda.streamCreate(1, 0);
probe('allocAsync0', () => cuda.memAllocAsync(0, s));
const pool = cuda.memPoolCreate({ device: 0 });
probe('allocFromPoolAsync0', () => cuda.memAllocFromPoolAsync(0, pool, s));
probe('freeAsync0', () => {
  cuda.memFreeAsync(0, s);
  cuda.streamSynchronize(s);
  return true;
});
probe('freeAsync0x1234', () => {
  cuda.memFreeAsync(0x1234, s);
  cuda.streamSynchronize(s);
  return true;
});
probe('memFree0', () => {
  cuda.memFree(0);
  return true;
});
probe('memAlloc0', () => cuda.memAlloc(0));
probe('freeAsyncInterior', () => {
  const p = cuda.memAllocAsync(MiB, s);
  try {
    cuda.memFreeAsync(p + 512, s);
  } finally {
    cuda.memFreeAsync(p, s);
    cuda.streamSynchronize(s);
  }
  return true;
});
probe('freeAsyncDoubleFree', () => {
  const p = cuda.memAllocAsync(MiB, s);
  cuda.memFreeAsync(p, s);
  cuda.streamSynchronize(s);
  cuda.memFreeAsync(p, s);
  cuda.streamSynchronize(s);
  return true;
});
probe('memFreeOfPoolBlock', () => {
  const p = cuda.memAllocAsync(MiB, s);
  cuda.streamSynchronize(s);
  cuda.memFree(p);
  return true;
});
cuda.memPoolDestroy(pool);

// Destroyed events and streams.
{
  const e = cuda.eventCreate(0);
  const e2 = cuda.eventCreate(0);
  cuda.eventRecord(e, s);
  cuda.eventRecord(e2, s);
  cuda.eventSynchronize(e2);
  cuda.eventDestroy(e);
  probe('destroyedEvent.query', () => cuda.eventQuery(e));
  probe('destroyedEvent.synchronize', () => cuda.eventSynchronize(e));
  probe('destroyedEvent.record', () => cuda.eventRecord(e, s));
  probe('destroyedEvent.elapsed', () => cuda.eventElapsedTime(e, e2));
  probe('destroyedEvent.elapsedEnd', () => cuda.eventElapsedTime(e2, e));
  probe('destroyedEvent.streamWait', () => cuda.streamWaitEvent(s, e));
  probe('destroyedEvent.destroy', () => cuda.eventDestroy(e));
  cuda.eventDestroy(e2);
  const never = cuda.eventCreate(0);
  const start = cuda.eventCreate(0);
  cuda.eventRecord(start, s);
  cuda.eventSynchronize(start);
  probe('neverRecorded.elapsed', () => cuda.eventElapsedTime(start, never));
  probe('neverRecorded.query', () => cuda.eventQuery(never));
  probe('neverRecorded.synchronize', () => cuda.eventSynchronize(never));
  const noTiming = cuda.eventCreate(2);
  cuda.eventRecord(noTiming, s);
  cuda.eventSynchronize(noTiming);
  probe('noTiming.elapsed', () => cuda.eventElapsedTime(start, noTiming));
  for (const x of [never, start, noTiming]) cuda.eventDestroy(x);
}
{
  const t = cuda.streamCreate(0, 0);
  const live = cuda.eventCreate(2);
  cuda.streamDestroy(t);
  probe('destroyedStream.synchronize', () => cuda.streamSynchronize(t));
  probe('destroyedStream.query', () => cuda.streamQuery(t));
  probe('destroyedStream.waitEvent', () => cuda.streamWaitEvent(t, live));
  probe('destroyedStream.record', () => cuda.eventRecord(live, t));
  probe('destroyedStream.destroy', () => cuda.streamDestroy(t));
  const p = cuda.memAlloc(4096);
  probe('destroyedStream.memsetAsync', () => cuda.memsetAsync(p, 0, 1, 16, t));
  probe('destroyedStream.allocAsync', () => cuda.memAllocAsync(4096, t));
  cuda.memFree(p);
  cuda.eventDestroy(live);
}

// Virtual memory: overlaps, partial mappings, outside reservations.
{
  const g = cuda.memGetAllocationGranularity(0);
  out.granularity = g;
  const va = cuda.memAddressReserve(2 * g, 0);
  const va2 = cuda.memAddressReserve(4 * g, 0);
  const h2 = cuda.memCreate(2 * g, 0);
  const h1 = cuda.memCreate(g, 0);
  probe('vmm.mapWhole', () => cuda.memMap(va, 2 * g, h2));
  probe('vmm.overlapPartialOfH2', () => cuda.memMap(va, g, h2));
  probe('vmm.overlapWholeH2', () => cuda.memMap(va, 2 * g, h2));
  probe('vmm.overlapWholeH1', () => cuda.memMap(va, g, h1));
  probe('vmm.overlapWholeH1Second', () => cuda.memMap(va + g, g, h1));
  probe('vmm.partialOfH2Fresh', () => cuda.memMap(va2, g, h2));
  probe('vmm.sizeLargerThanHandle', () => cuda.memMap(va2 + 2 * g, 2 * g, h1));
  probe('vmm.mapH1Fresh', () => cuda.memMap(va2 + 3 * g, g, h1));
  probe('vmm.unmapPartOfMapping', () => cuda.memUnmap(va, g));
  probe('vmm.unmapNothingMapped', () => cuda.memUnmap(va2 + g, g));
  probe('vmm.releaseMapped', () => cuda.memRelease(h1));
  probe('vmm.unmapH1', () => cuda.memUnmap(va2 + 3 * g, g));
  probe('vmm.createUnaligned', () => cuda.memCreate(g + 1, 0));
  probe('vmm.reserveUnaligned', () => cuda.memAddressReserve(g + 1, 0));
  const gone = cuda.memAddressReserve(g, 0);
  cuda.memAddressFree(gone, g);
  probe('vmm.mapIntoFreedReservation', () => cuda.memMap(gone, g, h2));
  probe('vmm.unmapWhole', () => cuda.memUnmap(va, 2 * g));
  probe('vmm.unmapPartialFresh', () => cuda.memUnmap(va2, g));
  probe('vmm.release', () => cuda.memRelease(h2));
  probe('vmm.releaseTwice', () => cuda.memRelease(h2));
  probe('vmm.free', () => cuda.memAddressFree(va, 2 * g));
  probe('vmm.free2', () => cuda.memAddressFree(va2, 4 * g));
}

// Free memory as the driver reports it, across allocations and frees.
{
  const steps = [];
  const at = (what) => steps.push([what, free()]);
  at('start');
  for (const bytes of [512, 4096, MiB, MiB + 1, 64 * MiB, 1 << 20, 3 * MiB + 7]) {
    const p = cuda.memAlloc(bytes);
    at(`alloc ${bytes}`);
    cuda.memFree(p);
    at(`free ${bytes}`);
    const attrs = cuda.pointerGetAttributes(p);
    steps.push([`freed ${bytes} memoryType`, attrs.memoryType]);
  }
  for (const bytes of [total + 1, total + 4096, total + 1024 * MiB]) {
    try {
      cuda.memFree(cuda.memAlloc(bytes));
    } catch (error) {
      steps.push([`alloc ${bytes}`, error.errorName, error.call]);
    }
    at(`after failed ${bytes}`);
  }
  try {
    cuda.memAllocPitch(total, 2, 4);
  } catch (error) {
    steps.push(['pitch', error.errorName, error.call]);
  }
  at('after failed pitch');
  const h = cuda.memHostAlloc(4096, 0);
  at('hostAlloc 4096');
  cuda.memFreeHost(h);
  at('freeHost');
  const m = cuda.memAllocManaged(4096, 1);
  at('managed 4096');
  cuda.memFree(m);
  at('free managed');
  const t2 = cuda.streamCreate(1, 0);
  at('streamCreate');
  cuda.streamDestroy(t2);
  at('streamDestroy');
  const many = [];
  for (let i = 0; i < 200; i++) many.push(cuda.memAlloc(1 + ((i * 7919) % 65536)));
  at('200 small');
  for (const p of many) cuda.memFree(p);
  at('200 small freed');
  out.freeSteps = steps;
  console.log(JSON.stringify({ freeSteps: steps }));
}

// Context stack: destroying the current created context.
probe('ctx.destroyCurrentCreated', () => {
  cuda.contextSetCurrent(primary);
  const created = cuda.contextCreate(0, 0);
  cuda.contextDestroy(created);
  return { current: cuda.contextGetCurrent(), primary };
});
probe('ctx.destroyCreatedNotCurrent', () => {
  const created = cuda.contextCreate(0, 0);
  cuda.contextSetCurrent(primary);
  cuda.contextDestroy(created);
  return { current: cuda.contextGetCurrent(), primary };
});
cuda.contextSetCurrent(primary);
probe('ctx.releasePrimaryToZeroThenUse', () => {
  // before: retained once above
  cuda.primaryContextRelease(0);
  return {
    current: cuda.contextGetCurrent(),
    info: (() => {
      try {
        return cuda.memGetInfo();
      } catch (e) {
        return e.errorName;
      }
    })(),
  };
});
probe('ctx.releaseUnretained', () => cuda.primaryContextRelease(0));
probe('ctx.retainAgain', () => {
  const p = cuda.primaryContextRetain(0);
  return { same: p === primary };
});
// Last: may be undefined behaviour in the driver.
probe('ctx.setCurrentDestroyed', () => {
  const again = cuda.primaryContextRetain(0);
  const created = cuda.contextCreate(0, 0);
  cuda.contextSetCurrent(again);
  cuda.contextDestroy(created);
  cuda.contextSetCurrent(created);
  return cuda.memGetInfo();
});
