/**
 * Chroma's mesh: triangle vertices (`float3`) and indices (`uint3`) written once by the host into
 * mapped, write-combined pinned memory and read in place by a kernel that computes each
 * triangle's area, with no copy to the device; then the same program with `place()`, which puts
 * the mesh in device memory when the device has room, gives the same areas. Runs on either
 * backend: `node dist/examples/chroma-mesh.js` (test/kernels/kernels-examples.test.ts runs it). On the
 * emulated backend the kernel's JavaScript implementation runs in place of the CUDA code.
 */
import assert from 'node:assert/strict';
import { Device, DeviceArray, HostArray } from '../src/index.js';
import { place } from '../src/public/interop.js';
import { Module, threadCount, type EmulatedKernel } from '../src/public/kernels.js';

const SOURCE = `
extern "C" __global__ void triangle_areas(const float3 *v, const uint3 *tri, float *area, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint3 t = tri[i];
  float3 a = v[t.x], b = v[t.y], c = v[t.z];
  float ux = b.x - a.x, uy = b.y - a.y, uz = b.z - a.z;
  float wx = c.x - a.x, wy = c.y - a.y, wz = c.z - a.z;
  float cx = uy * wz - uz * wy, cy = uz * wx - ux * wz, cz = ux * wy - uy * wx;
  area[i] = 0.5f * sqrtf(cx * cx + cy * cy + cz * cz);
}
`;

/** The same kernel for the emulated backend, in float32 arithmetic. */
const triangleAreas: EmulatedKernel = (launch) => {
  const [vPtr, triPtr, areaPtr, n] = launch.args as [number, number, number, number];
  const f = Math.fround;
  const tri = launch.memory.bytes(triPtr, 12 * n);
  const t = new Uint32Array(tri.buffer, tri.byteOffset, 3 * n);
  let vertices = 0;
  for (let k = 0; k < 3 * n; k++) vertices = Math.max(vertices, t[k]! + 1);
  const vb = launch.memory.bytes(vPtr, 12 * vertices);
  const v = new Float32Array(vb.buffer, vb.byteOffset, 3 * vertices);
  const ab = launch.memory.bytes(areaPtr, 4 * n);
  const area = new Float32Array(ab.buffer, ab.byteOffset, n);
  for (let i = 0; i < Math.min(n, threadCount(launch)); i++) {
    const [a, b, c] = [3 * t[3 * i]!, 3 * t[3 * i + 1]!, 3 * t[3 * i + 2]!];
    const ux = f(v[b]! - v[a]!), uy = f(v[b + 1]! - v[a + 1]!), uz = f(v[b + 2]! - v[a + 2]!);
    const wx = f(v[c]! - v[a]!), wy = f(v[c + 1]! - v[a + 1]!), wz = f(v[c + 2]! - v[a + 2]!);
    const cx = f(f(uy * wz) - f(uz * wy)), cy = f(f(uz * wx) - f(ux * wz)), cz = f(f(ux * wy) - f(uy * wx));
    area[i] = f(0.5 * f(Math.sqrt(f(f(f(cx * cx) + f(cy * cy)) + f(cz * cz)))));
  }
};

/** A (side x side) grid of quads on a paraboloid, two triangles each. */
function mesh(side: number): { vertices: Float32Array; indices: Uint32Array } {
  const vertices = new Float32Array(3 * (side + 1) * (side + 1));
  for (let y = 0; y <= side; y++) {
    for (let x = 0; x <= side; x++) {
      const k = 3 * (y * (side + 1) + x);
      const [px, py] = [x / side - 0.5, y / side - 0.5];
      vertices.set([px, py, px * px + py * py], k);
    }
  }
  const indices = new Uint32Array(6 * side * side);
  for (let y = 0, k = 0; y < side; y++) {
    for (let x = 0; x < side; x++, k += 6) {
      const a = y * (side + 1) + x;
      indices.set([a, a + 1, a + side + 1, a + 1, a + side + 2, a + side + 1], k);
    }
  }
  return { vertices, indices };
}

/** The areas in float64 on the host, the reference. */
function referenceAreas(vertices: Float32Array, indices: Uint32Array): Float64Array {
  const out = new Float64Array(indices.length / 3);
  for (let i = 0; i < out.length; i++) {
    const [a, b, c] = [3 * indices[3 * i]!, 3 * indices[3 * i + 1]!, 3 * indices[3 * i + 2]!];
    const u = [vertices[b]! - vertices[a]!, vertices[b + 1]! - vertices[a + 1]!, vertices[b + 2]! - vertices[a + 2]!];
    const w = [vertices[c]! - vertices[a]!, vertices[c + 1]! - vertices[a + 1]!, vertices[c + 2]! - vertices[a + 2]!];
    const cross = [u[1]! * w[2]! - u[2]! * w[1]!, u[2]! * w[0]! - u[0]! * w[2]!, u[0]! * w[1]! - u[1]! * w[0]!];
    out[i] = 0.5 * Math.hypot(cross[0]!, cross[1]!, cross[2]!);
  }
  return out;
}

const device = Device.get(0);
const { vertices, indices } = mesh(100);
const triangles = indices.length / 3;
using module = Module.compile(SOURCE, { emulated: { triangle_areas: triangleAreas } });
const kernel = module.kernel('triangle_areas', ['ptr', 'ptr', 'ptr', 'u32'] as const);
const { blockSize } = kernel.suggestedBlockSize();
const grid = Math.ceil(triangles / blockSize);

// 1. The mesh in mapped, write-combined pinned memory, written once (through the driver's copy
//    into its device view: a CPU view of write-combined memory is uncached, which vram warns
//    about) and read in place by the kernel over the bus.
using mappedVertices = HostArray.empty([vertices.length / 3], 'float3', { mapped: true, writeCombined: true });
using mappedIndices = HostArray.empty([triangles], 'uint3', { mapped: true, writeCombined: true });
mappedVertices.deviceView().copyFrom(vertices);
mappedIndices.deviceView().copyFrom(indices);
using areasMapped = DeviceArray.empty([triangles], 'float32');
kernel.launch({ grid, block: blockSize }, mappedVertices, mappedIndices, areasMapped, triangles);
const fromMapped = areasMapped.toHost();
console.log(`mapped write-combined: ${triangles} triangles, block ${blockSize}, total area ${fromMapped.reduce((s, a) => s + a, 0).toFixed(6)}`);

// 2. The same program with place(): device memory when the device has room, else mapped memory.
const placedVertices = place(vertices, { dtype: 'float3', writeCombined: true });
using v = placedVertices.array;
const placedIndices = place(indices, { dtype: 'uint3', writeCombined: true });
using t = placedIndices.array;
using areasPlaced = DeviceArray.empty([triangles], 'float32');
kernel.launch({ grid, block: blockSize }, v, t, areasPlaced, triangles);
const fromPlaced = areasPlaced.toHost();
console.log(`placed in ${placedVertices.placement} memory (indices in ${placedIndices.placement}): total area ${fromPlaced.reduce((s, a) => s + a, 0).toFixed(6)}`);

// The same kernel on the same bytes: the same areas, to the bit; and the float64 reference agrees.
assert.deepEqual(fromPlaced, fromMapped);
const reference = referenceAreas(vertices, indices);
for (let i = 0; i < triangles; i++) {
  assert.ok(Math.abs(fromMapped[i]! - reference[i]!) <= 1e-5 * reference[i]! + 1e-9, `triangle ${i}: ${fromMapped[i]} vs ${reference[i]}`);
}
console.log(`same areas both ways; within 1e-5 of the float64 reference (${device.backend.name} backend)`);
