// The claim heartbeat against live servers: it keeps a claim past several
// TTLs, and aborts its signal the moment the claim is lost, refused or
// lapsed.
import assert from "node:assert/strict";
import { ClaimLapsedError, NotHeldProblem, StaleFenceProblem, type Kept } from "../src/index.js";
import { client, onEach, unique } from "./servers.js";

// Long enough for a renewal's round trip on a loaded machine (2 cores
// shared by many test processes); the tests wait for states, not for it.
const ttl = 1500;

/**
 * keptPast waits until the claim's expiry moved n times and more than one
 * TTL passed since started, or fails with the reason the claim was lost.
 */
async function keptPast(get: () => Promise<{ expires_at?: string }>, kept: Kept, started: number, n: number) {
  let last = (await get()).expires_at;
  for (let moved = 0; moved < n || Date.now() - started <= ttl; ) {
    await new Promise((r) => setTimeout(r, ttl / 10));
    if (kept.signal.aborted) assert.fail(`the claim was lost: ${kept.signal.reason}`);
    const now = (await get()).expires_at;
    if (now !== last) {
      moved++;
      last = now;
    }
  }
}

onEach("keep: renews past several TTLs; a release makes the next renewal not-held, aborting the signal", async (_t, rf) => {
  const key = unique("keep");
  const cl = await rf.claims.acquire(key, "a", ttl);
  const started = Date.now();
  const kept = rf.claims.keep(cl, ttl);
  await keptPast(() => rf.claims.get(key), kept, started, 2);
  assert.ok(Date.now() - started > ttl, "kept past its TTL");
  assert.equal(kept.signal.aborted, false);
  assert.equal((await rf.claims.get(key)).live, true);

  await rf.claims.release(key, "a", cl.fence);
  const reason = await kept.done;
  assert.ok(reason instanceof NotHeldProblem, String(reason));
  assert.equal(kept.signal.aborted, true);
  assert.equal(kept.signal.reason, reason);
});

onEach("keep: another tenure makes the renewal stale-fence, aborting the signal", async (_t, rf) => {
  const key = unique("keep");
  const cl = await rf.claims.acquire(key, "a", ttl);
  const kept = rf.claims.keep(cl, ttl);
  await rf.claims.release(key, "a", cl.fence);
  await rf.claims.acquire(key, "b", 30_000);
  const reason = await kept.done;
  assert.ok(reason instanceof StaleFenceProblem, String(reason));
  assert.equal(reason.currentFence, cl.fence + 1);
});

onEach("keep: with the server unreachable the claim lapses after its TTL", async (_t, rf, s) => {
  const key = unique("keep");
  const cl = await rf.claims.acquire(key, "a", ttl);
  const cut = client(s, { fetch: async () => { throw new TypeError("fetch failed: connection refused"); } });
  const started = Date.now();
  const kept = cut.claims.keep(cl, ttl);
  const reason = await kept.done;
  assert.ok(reason instanceof ClaimLapsedError, String(reason));
  assert.equal(kept.signal.reason, reason);
  assert.ok(Date.now() - started >= ttl - 5, `lapsed after ${Date.now() - started} ms, not before its TTL`);
});

onEach("keep: stop and the caller's signal end the heartbeat without a loss", async (_t, rf) => {
  const cl = await rf.claims.acquire(unique("keep"), "a", ttl);
  const kept = rf.claims.keep(cl, ttl);
  await kept.stop();
  assert.equal(kept.signal.aborted, true);
  assert.equal(await kept.done, undefined);

  const parent = new AbortController();
  const kept2 = rf.claims.keep(cl, ttl, { signal: parent.signal });
  parent.abort(new Error("shutting down"));
  assert.equal(await kept2.done, undefined);
  assert.equal((kept2.signal.reason as Error).message, "shutting down");
  assert.equal((await rf.claims.get(cl.key)).live, true, "stop does not release");
});
