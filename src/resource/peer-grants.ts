/**
 * PeerGrants: the peer devices granted access to a resource's virtual-memory mappings, for every
 * mapping made now and later. The one record, and the one rule for copies between devices, that
 * the resources mapping memory with cuMemSetAccess share: the virtual-memory pool (PoolResource's
 * pages) and the SpillableResource. See Note [Peer copies of mapped memory] in
 * docs/design/peer-grants.md.
 */
import { MemAccess, type Backend, type Ptr } from '../backend/backend.js';
import type { Device } from '../device.js';

/** Peer devices' access to a resource's mappings: ordinal -> CUmemAccess_flags. */
export class PeerGrants {
  readonly #flags = new Map<number, number>();

  /**
   * The access `peer` was granted.
   *
   * @param peer A device ordinal.
   * @returns Its CUmemAccess_flags, MemAccess.NONE when none.
   */
  of(peer: number): number {
    return this.#flags.get(peer) ?? MemAccess.NONE;
  }

  /**
   * Records `peer`'s access (MemAccess.NONE forgets it); the caller sets it on what is mapped now.
   *
   * @param peer A device ordinal (not the resource's own device).
   * @param flags MemAccess.NONE, READ or READWRITE.
   */
  set(peer: number, flags: number): void {
    if (flags === MemAccess.NONE) this.#flags.delete(peer);
    else this.#flags.set(peer, flags);
  }

  /**
   * Sets every granted peer's access on a range just mapped (one cuMemSetAccess per peer).
   *
   * @param backend The backend that mapped it (its device current).
   * @param ptr The range's first byte.
   * @param bytes Its length (fully mapped).
   * @returns The driver calls made.
   */
  grant(backend: Backend, ptr: Ptr, bytes: number): number {
    for (const [peer, flags] of this.#flags) backend.memSetAccess(ptr, bytes, peer, flags);
    return this.#flags.size;
  }

  /**
   * The access `device` must be granted for a copy between devices that runs in its context over
   * memory of `owner`'s mappings: read for a source, read-write for a destination, added to what it
   * has (never taken away). Undefined when nothing is to grant: the owner itself, access enough
   * already, or devices that cannot reach each other at all (the driver then copies, or refuses,
   * as it does).
   *
   * @param owner The device whose memory is mapped.
   * @param device The device whose context runs the copy.
   * @param write Whether the copy writes the memory.
   * @returns The flags to grant (and record with `set`), or undefined.
   */
  forCopy(owner: Device, device: Device, write: boolean): number | undefined {
    if (device === owner) return undefined;
    const needed = write ? MemAccess.READWRITE : MemAccess.READ;
    const granted = this.of(device.ordinal);
    if ((granted & needed) === needed || !device.canAccessPeer(owner)) return undefined;
    return granted | needed;
  }
}
