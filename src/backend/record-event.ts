/**
 * `recordNewEvent`: an event that marks the work queued on a stream so far, made and recorded in
 * one step over any backend's event calls.
 */
import { EventFlags, type Backend, type Handle } from './backend.js';

/**
 * A new event (no timing) recorded on `stream`, marking the work queued there so far; the event
 * is destroyed again if the record fails, so nothing leaks. The caller destroys it when done.
 *
 * @param events The backend (its event calls).
 * @param stream The stream's handle.
 * @returns The event's handle.
 * @throws {CudaError} When the driver refuses the create or the record.
 * @example
 * ```ts
 * const event = recordNewEvent(device.backend, stream.handle);
 * ```
 */
export function recordNewEvent(events: Pick<Backend, 'eventCreate' | 'eventRecord' | 'eventDestroy'>, stream: Handle): Handle {
  const event = events.eventCreate(EventFlags.DISABLE_TIMING);
  try {
    events.eventRecord(event, stream);
  } catch (error) {
    events.eventDestroy(event);
    throw error;
  }
  return event;
}
