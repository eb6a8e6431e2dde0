// The client's edges, written from outside its code: the heartbeat's
// bounds in time and its refusals (with renewals of the test's own, which
// keep exports for any claim-like lease), the members a problem carries,
// the Idempotency-Key's encoding and bounds, the base URL, the 503s that
// wrote nothing.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ClaimLapsedError,
  HeldProblem,
  InvalidInputProblem,
  QuotaExceededProblem,
  idempotencyHeader,
  isClaimLost,
  keep,
} from "../src/index.js";
import { client, onEach, Recorder, unique } from "./servers.js";

const ttl = 1500;

/** hang is a renewal that never answers: it rejects only when its signal is aborted, lag ms later. */
function hang(lag = 0) {
  const h = {
    calls: 0,
    started: undefined as (() => void) | undefined,
    renew: (signal: AbortSignal) => {
      h.calls++;
      h.started?.();
      return new Promise<never>((_, reject) => {
        // A request in flight holds the process open (its socket); so
        // does this one, or Node would end the test while it waits.
        const open = setInterval(() => {}, 1_000);
        signal.addEventListener("abort", () => {
          clearInterval(open);
          setTimeout(() => reject(signal.reason), lag);
        }, { once: true });
      });
    },
  };
  return h;
}

test("keep: every refusal no retry cures ends the heartbeat at once with it, held and invalid input included", async () => {
  const held = new HeldProblem({ type: HeldProblem.problemType, title: "Held by another holder", status: 409 });
  const invalid = new InvalidInputProblem({ type: InvalidInputProblem.problemType, title: "Invalid input", status: 400 });
  for (const refusal of [held, invalid]) {
    assert.ok(isClaimLost(refusal), `${refusal.name} is a loss`);
    let calls = 0;
    const now = keep("k", 1, 30, async () => {
      calls++;
      throw refusal;
    });
    assert.equal(await now.done, refusal, `${refusal.name}: the reason is the refusal, not a lapse`);
    assert.equal(now.signal.reason, refusal);
    assert.equal(calls, 1, `${refusal.name}: one renewal, not retried`);
  }
});

test("keep: a signal aborted before it starts ends it at once, with no renewal", async () => {
  const reason = new Error("shutting down");
  const h = hang();
  const kept = keep("k", 1, 30, h.renew, { signal: AbortSignal.abort(reason) });
  assert.equal(kept.signal.aborted, true, "aborted at once");
  assert.equal(kept.signal.reason, reason);
  assert.equal(await kept.done, undefined);
  assert.equal(h.calls, 0, "no renewal");
});

// The test bounds its own wait and stops the heartbeat whatever happens:
// a renewal left unbounded must fail this test, not hold the process open.
test("keep: a renewal that never answers ends at the lease's deadline, and the claim lapses", async () => {
  const h = hang();
  const started = Date.now();
  const kept = keep("k", 7, 300, h.renew);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("no end 10 s after a 300 ms lease: the renewal in flight is unbounded")), 10_000);
  });
  try {
    const reason = await Promise.race([kept.done, bound]);
    assert.ok(reason instanceof ClaimLapsedError, String(reason));
    assert.equal(reason.fence, 7);
    assert.ok(Date.now() - started >= 300 - 5, "not before the TTL");
  } finally {
    clearTimeout(timer);
    await kept.stop();
  }
});

test("keep: stop returns once the renewal in flight has ended", async () => {
  const h = hang(50);
  const inFlight = new Promise<void>((resolve) => (h.started = resolve));
  const kept = keep("k", 1, 300, h.renew);
  await inFlight;
  let settled = false;
  void kept.done.then(() => (settled = true));
  await kept.stop();
  assert.ok(settled, "stop returned while the renewal was still in flight");
  assert.equal(await kept.done, undefined);
});

// The TTL counts from when the last renewal that succeeded was sent, as
// the server counts it, not from its reply: a reply held 600 ms moves
// the client's deadline no later than the server's expiry, and once
// renewals fail the lapse is reported by then (400 ms of slack; a reply
// counted from its arrival reports it 600 ms late).
test("keep: the TTL counts from when the renewal was sent, however late its reply", { timeout: 30_000 }, async () => {
  let sent = 0;
  let calls = 0;
  const kept = keep("k", 1, ttl, async () => {
    if (++calls > 1) throw new TypeError("fetch failed: connection refused");
    sent = Date.now();
    await new Promise((r) => setTimeout(r, 600));
  });
  const reason = await kept.done;
  const late = Date.now() - (sent + ttl);
  assert.ok(reason instanceof ClaimLapsedError, String(reason));
  assert.ok(late < 400, `the lapse reported ${late} ms after the lease the server kept ended`);
});

test("idempotencyHeader: 1 to 255 printable characters, a quote and a backslash escaped", () => {
  assert.equal(idempotencyHeader("k".repeat(255)), `"${"k".repeat(255)}"`);
  assert.throws(() => idempotencyHeader("k".repeat(256)), RangeError);
  assert.throws(() => idempotencyHeader(""), RangeError);
  assert.equal(idempotencyHeader('a\\b"c'), '"a\\\\b\\"c"');
});

onEach("an Idempotency-Key with a backslash and a quote is the same key on every attempt; one too long is refused before anything is sent", async (_t, _rf, s) => {
  const rec = new Recorder();
  const rf = client(s, { fetch: rec.fetch });
  const key = unique("escaped");
  rec.loseReplies = 1;
  const cl = await rf.claims.acquire(key, "a", 30_000, { key: `op\\${key}"1` });
  assert.equal(cl.fence, 1, "the retry was answered the recorded claim");
  assert.equal(rec.requests.length, 2);
  await assert.rejects(rf.claims.acquire(unique("long"), "a", 30_000, { key: "k".repeat(256) }), RangeError);
  assert.equal(rec.requests.length, 2, "nothing sent");
});

onEach("a base URL with trailing slashes reaches the same routes", async (_t, rf, s) => {
  const key = unique("slash");
  await rf.claims.acquire(key, "a", 30_000);
  for (const base of [s.url + "/", s.url + "//"]) {
    assert.equal((await client(s, { baseUrl: base }).claims.get(key)).holder, "a", base);
  }
});

onEach("a quota refusal's retryAfterMs is the problem's exact retry_after_ms, not Retry-After's whole seconds", async (_t, rf) => {
  // A fixed window is aligned on multiples of per_ms: two charges that
  // straddle a boundary are both allowed, and a wait of whole seconds
  // cannot tell the exact member from the header. Either is a new try.
  const policy = { kind: "window" as const, rate: 1, per_ms: 60_000 };
  for (let attempt = 0; attempt < 5; attempt++) {
    const key = unique("exact");
    await rf.quotas.consume(key, policy);
    const denied = await rf.quotas.consume(key, policy).then(
      () => undefined,
      (e: unknown) => e,
    );
    if (denied === undefined) continue;
    assert.ok(denied instanceof QuotaExceededProblem, String(denied));
    assert.equal(typeof denied.members.retry_after_ms, "number");
    if ((denied.members.retry_after_ms as number) % 1000 === 0) continue;
    assert.equal(denied.retryAfterMs, denied.members.retry_after_ms);
    assert.ok(denied.retryAfterMs! <= 60_000);
    return;
  }
  assert.fail("five tries straddled a window or waited whole seconds");
});

onEach("a problem's title is the server's own, not the status text", async (_t, rf) => {
  const key = unique("title");
  await rf.claims.acquire(key, "a", 30_000);
  const held = await rf.claims.acquire(key, "b", 30_000).then(
    () => assert.fail("b won a held key"),
    (e: unknown) => e,
  );
  assert.ok(held instanceof HeldProblem, String(held));
  assert.equal(held.title, "Held by another holder");
});

// A 503 that wrote nothing is retried like the unavailable one: a node
// that accepts no writes (a standby during a failover) or a strict
// server with no synchronous standby.
onEach("a read-only or not-durable 503 is retried", async (_t, _rf, s) => {
  for (const name of ["read-only", "not-durable"]) {
    let requests = 0;
    const rf = client(s, {
      fetch: async (request: Request) => {
        if (++requests === 1) {
          return new Response(JSON.stringify({ type: `urn:racefree:problem:${name}`, title: name, status: 503 }), {
            status: 503,
            headers: { "Content-Type": "application/problem+json", "Retry-After": "0" },
          });
        }
        return fetch(request);
      },
    });
    const cl = await rf.claims.acquire(unique(name), "a", 30_000);
    assert.equal(cl.fence, 1, name);
    assert.equal(requests, 2, name);
  }
});
