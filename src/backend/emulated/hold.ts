/**
 * A condition an operation waits for (cuStreamWaitValue32): `ready` reads memory each time it is
 * asked; `progress` runs the other streams' runnable work, which on a GPU runs meanwhile and may
 * write the awaited value (a cuStreamWriteValue32, a copy); `describe` says what is awaited, for
 * the error of a synchronisation that cannot finish.
 */
export interface Hold {
  readonly ready: () => boolean;
  readonly progress: () => void;
  readonly describe: () => string;
}
