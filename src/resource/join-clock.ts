/**
 * What a stream's lane of freed memory knows about stream order beyond its event, so that
 * `StreamOrder` can leave out joins that order nothing new (docs/design/stream-joins.md): whether
 * memory was freed into the lane since its event was last recorded, which record that was, and
 * which records of other lanes its stream has waited for, directly or through the lanes it waited on.
 */

/**
 * A lane's join clock; lanes are numbered by the resource (small integers, never reused).
 *
 * @example
 * ```ts
 * const lane: Lane = { stream: a.handle, event: 0, retired: false, clock: new JoinClock(1) };
 * lane.clock!.freed = true; // on every free into the lane
 * ```
 */
export class JoinClock {
  /** Memory was freed into the lane since its event was last recorded (set by the resource on each free). */
  freed = false;
  /** Records of the lane's event so far (0: never recorded). */
  epoch = 0;
  /** By lane number: the latest record of that lane's event the lane's stream follows (waited for, or transitively). */
  private readonly follows: number[] = [];
  /** `follows` as it was at the lane's last record, its own record included: what a wait on its event gives. */
  private covered: number[] = [];

  /**
   * @param lane The lane's number.
   * @throws Never.
   * @example
   * ```ts
   * const clock = new JoinClock(lists.id);
   * ```
   */
  constructor(readonly lane: number) {}

  /**
   * True when this lane's stream already follows `other`'s last record, and nothing was freed into `other` since.
   *
   * @param other The lane about to be joined.
   * @returns Whether the join would order nothing new.
   * @throws Never.
   * @example
   * ```ts
   * if (taker.clock.followsAll(lane.clock)) return; // no record, no wait
   * ```
   */
  followsAll(other: JoinClock): boolean {
    return !other.freed && other.epoch > 0 && (this.follows[other.lane] ?? 0) >= other.epoch;
  }

  /**
   * True when this lane's stream follows `other`'s last record (a wait on it would add nothing).
   *
   * @param other A lane (a retired one: its last record is final).
   * @returns Whether a wait on `other`'s event would add nothing.
   * @throws Never.
   * @example
   * ```ts
   * if (lane.retired && taker.clock.followsLast(lane.clock)) return;
   * ```
   */
  followsLast(other: JoinClock): boolean {
    return other.epoch > 0 && (this.follows[other.lane] ?? 0) >= other.epoch;
  }

  /**
   * The lane's event was just recorded on its stream.
   *
   * @throws Never.
   * @example
   * ```ts
   * backend.eventRecord(lane.event, lane.stream);
   * lane.clock?.recorded();
   * ```
   */
  recorded(): void {
    this.epoch++;
    this.freed = false;
    this.follows[this.lane] = this.epoch;
    this.covered = this.follows.slice();
  }

  /**
   * This lane's stream just waited on `other`'s event: it follows what that record covers.
   *
   * @param other The lane whose event was waited on.
   * @throws Never.
   * @example
   * ```ts
   * backend.streamWaitEvent(taker.stream, lane.event);
   * taker.clock.waited(lane.clock);
   * ```
   */
  waited(other: JoinClock): void {
    const c = other.covered;
    const f = this.follows;
    for (let k = 0; k < c.length; k++) if ((c[k] ?? 0) > (f[k] ?? 0)) f[k] = c[k]!;
  }
}
