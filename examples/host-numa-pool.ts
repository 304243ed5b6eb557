/**
 * A stream-ordered pool of pinned host memory on the GPU's own NUMA node (CUDA's cuMemPoolCreate with
 * CU_MEM_LOCATION_TYPE_HOST_NUMA): staging buffers the host fills through a zero-copy view and the device
 * copies from, freed back to the pool in stream order. The README shows it; test/package/examples.test.ts runs it.
 */
import { Device, DeviceArray, HostArray, Stream, sum } from '../src/index.js';
import { AsyncResource } from '../src/public/resources.js';

const device = Device.get(0);
// The node nearest the device (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID); a NotSupportedError where the driver has none.
// No maxSize: the driver does not bound such a pool (a memory budget does).
using staging = new AsyncResource({ pool: { location: { type: 'host-numa' } } });
using stream = Stream.create();
using frame = HostArray.empty([1080, 1920], 'float32', { resource: staging, stream });
stream.synchronize();                                    // stream-ordered memory: touch it once the stream got there
frame.data.fill(0.5);                                    // written in place: the pool's pinned memory, no copy
using image = DeviceArray.empty([1080, 1920], 'float32');
image.copyFrom(frame);
console.log(`node ${staging.hostNumaId} of device ${device.ordinal}: ${staging.kind} memory, ${sum(image)} summed on the device`);
frame.free();                                            // back to the pool on its stream
stream.synchronize();
staging.trimTo(0);                                       // and the pool's idle memory back to the system
console.log(`after trim: ${staging.reservedBytes} bytes reserved`);
