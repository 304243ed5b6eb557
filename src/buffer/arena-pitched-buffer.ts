/**
 * `ArenaPitchedBuffer`: a pitched block of an `ArenaResource` (`allocatePitched`) as a
 * `DeviceBuffer`, freed back to the arena with `deallocatePitched`. `DeviceArray.pitched` takes
 * one when given an arena.
 */
import type { Ptr } from '../backend/backend.js';
import type { ArenaResource } from '../resource/suballoc/arena.js';
import type { StreamRef } from '../stream.js';
import { chargeAllocated } from './budget.js';
import { DeviceBuffer } from './device-buffer.js';
import type { Release } from './lifetime.js';

/** A pitched block of an ArenaResource as a buffer: freed back to the arena with deallocatePitched. */
export class ArenaPitchedBuffer extends DeviceBuffer {
  private constructor(ptr: Ptr, bytes: number, arena: ArenaResource, stream: StreamRef, release: Release) {
    super(ptr, bytes, arena, stream, release);
  }

  /** Takes `height` rows of at least `widthBytes` from the arena; the pitch comes back with the buffer. */
  static take(arena: ArenaResource, widthBytes: number, height: number, stream: StreamRef): { buffer: DeviceBuffer; pitch: number } {
    const { ptr, pitch } = arena.allocatePitched(widthBytes, height, stream);
    // Built here so that the release captures the arena and pointer, never the buffer.
    const refund = chargeAllocated(pitch * height, 'DeviceArray.pitched', () => arena.deallocatePitched(ptr, stream));
    const release: Release = (on) => {
      arena.deallocatePitched(ptr, on);
      refund?.();
    };
    return { buffer: new ArenaPitchedBuffer(ptr, pitch * height, arena, stream, release), pitch };
  }
}
