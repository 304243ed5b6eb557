/**
 * PyCUDA's contexts in vram: a context made the way `make_default_context` makes one, its cache
 * preference set as Chroma's `create_cuda_context` does, pushed for a piece of work and popped at the
 * end of the scope (`using`), a context adopted from a handle made elsewhere (borrowed, never destroyed
 * by vram), and the device's current pool that other libraries' cudaMallocAsync use. It prints what it
 * checked; test/device/context-stack.test.ts runs it on the selected backend.
 */
import { Context, Device, DeviceBuffer } from '../src/index.js';
import { AsyncResource } from '../src/public/resources.js';

const device = Device.get(0);
using ctx = Context.makeDefault({ schedule: 'blocking-sync', lmemResizeToMax: true }); // the first device that accepts one
ctx.setCacheConfig('prefer-l1');
Context.primary(device).makeCurrent();                    // back on the shared primary context

{
  using _pushed = ctx.push();                             // cuCtxPushCurrent: vram's calls on the device run in ctx
  using buf = DeviceBuffer.allocate(1 << 20);
  console.log(`pushed: current is ctx ${Context.current === ctx}, ${buf.byteLength} bytes allocated in it`);
}                                                         // popped here: the device is on its primary context again
console.log(`popped: current is the primary ${Context.current?.isPrimary === true}`);

const adopted = Context.fromHandle(ctx.handle);           // a CUcontext another library made: borrowed
console.log(`adopted: device ${adopted.device.ordinal}, borrowed ${adopted.borrowed}`);

using pool = new AsyncResource({ pool: { maxSize: '64M' } });
device.setMemPool(pool);                                  // cudaDeviceSetMemPool: cudaMallocAsync on the device uses it
console.log(`current pool set: ${device.memPool === pool.pool}`);
