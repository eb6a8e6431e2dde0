// The claim heartbeat, as the Go client's Keep (internal/heartbeat):
// renew at a third of the TTL, retry a failure that may pass at a tenth,
// and abort the kept signal the moment the claim is lost.
import {
  ClaimLapsedError,
  HeldProblem,
  InvalidInputProblem,
  NotHeldProblem,
  StaleFenceProblem,
} from "./problems.js";

/** Renewals happen every ttl/fraction; a failed one that may pass is retried every ttl/retryFraction. */
export const fraction = 3;
export const retryFraction = 10;

/** KeepOptions are the options of a heartbeat. */
export interface KeepOptions {
  /** signal ends the heartbeat when aborted, and aborts the kept signal with its reason. */
  signal?: AbortSignal;
}

/** Kept is a running heartbeat. */
export interface Kept {
  /**
   * signal is aborted when the claim is lost (reason: the refusal, or a
   * ClaimLapsedError), when stop is called, or when options.signal is
   * aborted.
   */
  readonly signal: AbortSignal;
  /**
   * done resolves when the heartbeat ends: with the reason the claim was
   * lost, or undefined when it was stopped.
   */
  readonly done: Promise<Error | undefined>;
  /** stop ends the heartbeat and waits for it; it does not release the claim. */
  stop(): Promise<void>;
}

/**
 * isClaimLost reports whether a renewal's error means the claim is lost
 * for good (another tenure began, it lapsed or was released, or the
 * renewal can never succeed), rather than a failure that may pass; as
 * claim.Lost in Go.
 */
export function isClaimLost(err: unknown): boolean {
  return (
    err instanceof StaleFenceProblem ||
    err instanceof NotHeldProblem ||
    err instanceof HeldProblem ||
    err instanceof InvalidInputProblem
  );
}

/**
 * keep runs renew every ttlMs/fraction until stopped. Each renewal's
 * signal ends at the lease's deadline (ttlMs after the last renewal that
 * succeeded was sent), so a renewal that hangs cannot hide a lapse.
 */
export function keep(
  key: string,
  fence: number,
  ttlMs: number,
  renew: (signal: AbortSignal) => Promise<unknown>,
  options?: KeepOptions,
): Kept {
  const ctl = new AbortController();
  const parent = options?.signal;
  const onParent = () => ctl.abort(parent!.reason);
  if (parent?.aborted) ctl.abort(parent.reason);
  else parent?.addEventListener("abort", onParent, { once: true });

  let deadline = Date.now() + ttlMs;
  const done = (async (): Promise<Error | undefined> => {
    let delay = ttlMs / fraction;
    try {
      for (;;) {
        if (!(await pause(delay, ctl.signal))) return undefined;
        const sent = Date.now();
        let err: unknown;
        // The lease's deadline ends the renewal: a timer of its own, not
        // AbortSignal.timeout, which AbortSignal.any holds weakly, so that
        // Node may collect it and a renewal that hangs never ends.
        const bound = new AbortController();
        const timer = setTimeout(
          () => bound.abort(new DOMException("the lease's deadline passed", "TimeoutError")),
          Math.max(1, deadline - sent),
        );
        try {
          await renew(AbortSignal.any([ctl.signal, bound.signal]));
        } catch (e) {
          err = e ?? new Error("renewal failed");
        } finally {
          clearTimeout(timer);
        }
        if (ctl.signal.aborted) return undefined;
        if (err === undefined) {
          deadline = sent + ttlMs;
          delay = ttlMs / fraction;
        } else if (isClaimLost(err)) {
          const reason = err instanceof Error ? err : new Error(String(err));
          ctl.abort(reason);
          return reason;
        } else if (Date.now() >= deadline) {
          const reason = new ClaimLapsedError(key, fence);
          ctl.abort(reason);
          return reason;
        } else {
          delay = Math.min(ttlMs / retryFraction, deadline - Date.now());
        }
      }
    } finally {
      parent?.removeEventListener("abort", onParent);
    }
  })();
  return {
    signal: ctl.signal,
    done,
    async stop() {
      ctl.abort();
      await done;
    },
  };
}

/** pause waits ms; false when signal was aborted first. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
