/**
 * The README's first program ("Install and first program"), word for word below the header: four numbers
 * copied to the device, summed there, the array freed at the end of the scope by `using`. It prints
 * `cuda: sum 10` on a GPU and `emulated: sum 10` without one. test/package/examples.test.ts checks the README shows
 * this file and runs it; test/package/consumer.test.ts compiles the README's copy in a fresh `npm init -y` project.
 */
import { DeviceArray, getBackend, sum } from '../src/index.js';

using x = DeviceArray.from(new Float32Array([1, 2, 3, 4]));   // on the device; freed at the end of scope
console.log(`${getBackend().name}: sum ${sum(x)}`);            // "cuda: sum 10" ("emulated" without a GPU)
