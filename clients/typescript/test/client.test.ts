// Every route family through the typed client, against live servers on
// each engine: answers, typed problems, credentials and the
// Idempotency-Key retries.
import assert from "node:assert/strict";
import {
  AuditUnconfiguredProblem,
  HeldProblem,
  IdempotencyKeyMismatchProblem,
  InsufficientScopeProblem,
  InvalidInputProblem,
  NotFoundProblem,
  NotHeldProblem,
  OutcomeUnknownError,
  QuotaExceededProblem,
  StaleFenceProblem,
  TokenUsedProblem,
  TokenUnknownProblem,
  TransportError,
  UnavailableProblem,
  UnauthorizedProblem,
  createClient,
  type RacefreeProblem,
  type paths,
} from "../src/index.js";
import { client, onEach, Recorder, sign, unavailable, unique } from "./servers.js";

/** rejects awaits p's failure and returns it, checked to be an instance of Class. */
async function rejects<T>(p: Promise<unknown>, Class: new (...args: never[]) => T): Promise<T> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof Class, `want ${Class.name}, got ${String(err)}`);
    return err;
  }
  assert.fail(`want ${Class.name}, got success`);
}

onEach("health, readiness and the document answer anonymously", async (_t, _rf, s) => {
  const anon = createClient({ baseUrl: s.url });
  assert.equal((await anon.retry((a) => anon.api.GET("/healthz", a))).status, "ok");
  const ready = await anon.retry((a) => anon.api.GET("/readyz", a));
  assert.equal(ready.engine, s.engine);
});

onEach("claims: one winner, the live holder named, fence kept, stale and not-held refused", async (_t, rf) => {
  const key = unique("claim");
  const won = await rf.claims.acquire(key, "a", 30_000);
  assert.equal(won.holder, "a");
  assert.equal(won.fence, 1);
  assert.equal((await rf.claims.acquire(key, "a", 30_000)).fence, 1, "the holder's own live claim is won again with its fence");

  const held = await rejects(rf.claims.acquire(key, "b", 30_000), HeldProblem);
  assert.equal(held.status, 409);
  assert.equal(held.type, "urn:racefree:problem:held");
  assert.equal(held.holder, "a");
  assert.equal(held.fence, 1);
  assert.ok(held.expiresAt instanceof Date && held.expiresAt.getTime() > Date.now());
  assert.ok(held.requestId, "the request's id");

  const renewed = await rf.claims.renew(key, "a", 1, 60_000);
  assert.equal(renewed.fence, 1);
  assert.deepEqual((await rf.claims.get(key)).expires_at, renewed.expires_at);

  await rf.claims.release(key, "a", 1);
  await rf.claims.release(key, "a", 1); // retrying a release succeeds while no other tenure began
  assert.equal((await rf.claims.acquire(key, "b", 30_000)).fence, 2);
  const stale = await rejects(rf.claims.renew(key, "a", 1, 30_000), StaleFenceProblem);
  assert.equal(stale.fence, 1);
  assert.equal(stale.currentFence, 2);
  await rejects(rf.claims.renew(key, "a", 9, 30_000), NotHeldProblem);
  await rejects(rf.claims.get(unique("none")), NotFoundProblem);
  const bad = await rejects(rf.claims.acquire(key, "c", 0), InvalidInputProblem);
  assert.equal(bad.status, 400);
  assert.match(bad.detail ?? "", /ttl/);
});

onEach("claims: of many concurrent acquires of one key exactly one wins, every loser names it", async (_t, rf) => {
  const key = unique("race");
  const results = await Promise.allSettled(Array.from({ length: 16 }, (_, i) => rf.claims.acquire(key, `h${i}`, 30_000)));
  const winners = results.filter((r) => r.status === "fulfilled");
  assert.equal(winners.length, 1);
  const winner = winners[0]!.value.holder;
  for (const r of results) {
    if (r.status === "rejected") {
      assert.ok(r.reason instanceof HeldProblem, String(r.reason));
      assert.equal(r.reason.holder, winner);
    }
  }
});

onEach("idempotent: a retry after a lost reply carries the same key and gets the recorded answer", async (_t, _rf, s) => {
  const rec = new Recorder();
  const rf = client(s, { fetch: rec.fetch });
  const key = unique("lost");
  rec.loseReplies = 1;
  const cl = await rf.claims.acquire(key, "a", 30_000);
  assert.equal(cl.fence, 1);
  assert.equal(rec.keys.length, 2);
  assert.ok(rec.keys[0] && rec.keys[0] === rec.keys[1], `one key for both attempts: ${rec.keys}`);

  // A quota charged once although its reply was lost: one unit a minute.
  const quota = unique("quota");
  const policy = { kind: "window" as const, rate: 1, per_ms: 60_000 };
  rec.loseReplies = 1;
  const first = await rf.idempotent((a) => rf.api.POST("/v1/quotas/{key}/consume", { params: { path: { key: quota } }, body: { policy }, ...a }));
  assert.equal(first.allowed, true);
  const denied = await rejects(
    rf.idempotent((a) => rf.api.POST("/v1/quotas/{key}/consume", { params: { path: { key: quota } }, body: { policy }, ...a })),
    QuotaExceededProblem,
  );
  assert.equal(denied.status, 429);
  assert.ok(denied.retryAfterMs! > 0 && denied.retryAfterMs! <= 60_000, `retry_after_ms ${denied.retryAfterMs}`);
  assert.equal(denied.remaining, 0);
  assert.ok(denied.resetAt instanceof Date);

  // The caller's own key, reused with another request.
  const own = unique("op");
  await rf.idempotent((a) => rf.api.POST("/v1/sequences/{scope}/{name}/next", { params: { path: { scope: "ts", name: own } }, body: { n: 1 }, ...a }), { key: own });
  await rejects(
    rf.idempotent((a) => rf.api.POST("/v1/sequences/{scope}/{name}/next", { params: { path: { scope: "ts", name: own } }, body: { n: 2 }, ...a }), { key: own }),
    IdempotencyKeyMismatchProblem,
  );
  await assert.rejects(rf.claims.acquire(key, "a", 30_000, { key: "" }), RangeError);
});

onEach("release: after a lost reply, a refusal the lost attempt may have caused is an unknown outcome", async (_t, rf, s) => {
  for (const lostAs503 of [false, true]) {
    const rec = new Recorder();
    rec.lostAs503 = lostAs503;
    const lossy = client(s, { fetch: rec.fetch });
    // Taken over before the retry: the release happened, the key was taken since.
    const key = unique("release-lost");
    const cl = await lossy.claims.acquire(key, "w1", 30_000);
    rec.between = async () => {
      assert.equal((await rf.claims.acquire(key, "w2", 30_000)).fence, cl.fence + 1);
    };
    rec.loseReplies = 1;
    const err = await rejects(lossy.claims.release(key, "w1", cl.fence), OutcomeUnknownError);
    assert.ok(!(err instanceof StaleFenceProblem));
    assert.ok(err.cause instanceof StaleFenceProblem, `cause ${String(err.cause)}`);
    assert.equal(err.cause.currentFence, cl.fence + 1);
    assert.equal((await rf.claims.get(key)).holder, "w2");
    // Free at the retry: the retry succeeds.
    const free = unique("release-free");
    const mine = await lossy.claims.acquire(free, "w1", 30_000);
    rec.between = async () => {};
    rec.loseReplies = 1;
    await lossy.claims.release(free, "w1", mine.fence);
    assert.equal((await rf.claims.get(free)).live, false);
  }
  // A stale release answered at once is the refusal itself.
  const key = unique("release-stale");
  const cl = await rf.claims.acquire(key, "w1", 30_000);
  await rf.claims.release(key, "w1", cl.fence);
  await rf.claims.acquire(key, "w2", 30_000);
  await rejects(rf.claims.release(key, "w1", cl.fence), StaleFenceProblem);
});

onEach("once: a POST without an Idempotency-Key is never sent twice", async (_t, _rf, s) => {
  const rec = new Recorder();
  const rf = client(s, { fetch: rec.fetch });
  rec.loseReplies = 1;
  const err = await rejects(
    rf.once((a) => rf.api.POST("/v1/tokens", { body: { kind: "code", purpose: "login", subject: "u1", ttl_ms: 60_000 }, ...a })),
    TransportError,
  );
  assert.ok(err.cause instanceof TypeError);
  assert.equal(rec.keys.length, 1);
  assert.equal(rec.keys[0], null, "no Idempotency-Key");
});

onEach("events: observe once per window, record the result under the fence", async (_t, rf) => {
  const fingerprint = unique("fp");
  const seen = await rf.idempotent((a) => rf.api.POST("/v1/events", { body: { source: "ts", level: "error", message: "boom", fingerprint, window_ms: 60_000 }, ...a }));
  assert.equal(seen.process, true);
  const again = await rf.idempotent((a) => rf.api.POST("/v1/events", { body: { source: "ts", level: "error", message: "boom", fingerprint, window_ms: 60_000 }, ...a }));
  assert.equal(again.process, false);
  const result = await rf.idempotent((a) =>
    rf.api.POST("/v1/events/{fingerprint}/result", { params: { path: { fingerprint } }, body: { fence: seen.fence!, classification: "bug" }, ...a }),
  );
  assert.equal(result.classification, "bug");
  await rejects(
    rf.idempotent((a) => rf.api.POST("/v1/events/{fingerprint}/result", { params: { path: { fingerprint: unique("none") } }, body: { fence: 1 }, ...a })),
    NotFoundProblem,
  );
});

onEach("inbox: a signed delivery is received once, then listed", async (_t, rf, s) => {
  const id = unique("msg");
  const body = JSON.stringify({ type: "order.paid", id });
  const anon = createClient({ baseUrl: s.url });
  // The signature's headers, as params (the document may list them) or plain headers.
  const header = { ...sign(s.inbox_secret, id, body), "X-Request-Id": unique("req") };
  const deliver = () =>
    anon.retry((a) =>
      anon.api.POST("/v1/inbox/{source}", {
        params: { path: { source: s.inbox_source }, header },
        body: JSON.parse(body),
        bodySerializer: () => body,
        ...a,
        headers: { ...a.headers, "Content-Type": "application/json" },
      }),
    );
  await deliver();
  await deliver(); // a redelivery is acknowledged, not received again
  const list = (await rf.retry((a) => rf.api.GET("/v1/inbox/{source}", { params: { path: { source: s.inbox_source } }, ...a }))) as {
    events: { id: string; status: string }[];
  };
  assert.deepEqual(list.events.filter((e) => e.id === id).map((e) => e.status), ["processed"]);
});

onEach("sequences: gapless numbers", async (_t, rf) => {
  const name = unique("seq");
  const next = (n: number) =>
    rf.idempotent((a) => rf.api.POST("/v1/sequences/{scope}/{name}/next", { params: { path: { scope: "ts", name } }, body: { n }, ...a }));
  assert.deepEqual([(await next(3)).first, (await next(1)).first], [1, 4]);
});

onEach("tokens: a one-time code is consumed exactly once", async (_t, rf) => {
  const issued = (await rf.once((a) => rf.api.POST("/v1/tokens", { body: { kind: "code", purpose: "login", subject: "u1", ttl_ms: 60_000 }, ...a }))) as unknown as {
    token: string;
  };
  const consume = (token: string) => rf.idempotent((a) => rf.api.POST("/v1/tokens/consume", { body: { purpose: "login", token }, ...a }));
  const used = (await consume(issued.token)) as unknown as { subject: string };
  assert.equal(used.subject, "u1");
  await rejects(consume(issued.token), TokenUsedProblem);
  await rejects(consume("no-such-token"), TokenUnknownProblem);
});

onEach("audit: append, list, checkpoint and verify a scope's chain", async (_t, rf) => {
  const scope = unique("audit");
  for (const action of ["create", "update"]) {
    await rf.idempotent((a) => rf.api.POST("/v1/audit", { body: { scope, actor: "ts", action, data: { n: 1 } }, ...a }));
  }
  const list = await rf.retry((a) => rf.api.GET("/v1/audit", { params: { query: { scope } }, ...a }));
  assert.deepEqual(list.entries?.map((e) => e.action), ["create", "update"]);
  await rf.idempotent((a) => rf.api.POST("/v1/audit/checkpoints", { body: { scope }, ...a }));
  await rf.retry((a) => rf.api.GET("/v1/audit/checkpoints/latest", { params: { query: { scope } }, ...a }));
  const verified = await rf.retry((a) => rf.api.GET("/v1/audit/verify", { params: { query: { scope } }, ...a }));
  assert.equal(verified.intact, true);
  void AuditUnconfiguredProblem;
});

/** noSuchDeadLetter is an id no dead letter has, typed as the document types ids. */
const noSuchDeadLetter = 999999999 as unknown as paths["/v1/outbox/dead/{id}/redrive"]["post"]["parameters"]["path"]["id"];

onEach("outbox: enqueue, stats, dead letters", async (_t, rf) => {
  const queued = (await rf.idempotent((a) => rf.api.POST("/v1/outbox", { body: { topic: unique("topic"), payload: { n: 1 } }, ...a }))) as unknown as {
    id: number;
  };
  assert.ok(queued.id > 0);
  const stats = (await rf.retry((a) => rf.api.GET("/v1/outbox/stats", a))) as unknown as { backlog: number };
  assert.ok(stats.backlog >= 1);
  await rf.retry((a) => rf.api.GET("/v1/outbox/dead", a));
  await rejects(rf.idempotent((a) => rf.api.POST("/v1/outbox/dead/{id}/redrive", { params: { path: { id: noSuchDeadLetter } }, ...a })), NotFoundProblem);
});

onEach("credentials: none is unauthorized, a read key may read and not write", async (_t, _rf, s) => {
  const anon = createClient({ baseUrl: s.url });
  const unauthorized: RacefreeProblem = await rejects(anon.claims.get(unique("k")), UnauthorizedProblem);
  assert.equal(unauthorized.status, 401);
  const reader = createClient({ baseUrl: s.url, apiKey: s.read_key });
  await rejects(reader.claims.get(unique("k")), NotFoundProblem);
  const refused = await rejects(reader.claims.acquire(unique("k"), "a", 1000), InsufficientScopeProblem);
  assert.equal(refused.status, 403);
});

/**
 * between is a fetch that answers the first `fail` requests itself with
 * answer (what a proxy or the network may answer instead of the server)
 * and passes the others to the server; it counts every request.
 */
function between(fail: number, answer: (request: Request) => Promise<Response>) {
  const f = {
    requests: 0,
    fetch: async (request: Request): Promise<Response> => {
      f.requests++;
      if (f.requests <= fail) return answer(request);
      return fetch(request);
    },
  };
  return f;
}


// The wait before a retry is the server's Retry-After (in seconds) when it
// asks for more than the backoff, never more than maxBackoffMs: an hour
// under a maxBackoffMs of 1 retries at once; a second under an hour's
// waits that second (a lower bound, which a slow machine only lengthens).
onEach("retries wait the server's Retry-After, bounded by maxBackoffMs", async (_t, rf, s) => {
  const key = unique("ra");
  await rf.claims.acquire(key, "w1", 60_000);
  const hour = between(1, async () => unavailable("3600"));
  const got = await client(s, { fetch: hour.fetch, attempts: 2, backoffMs: 1, maxBackoffMs: 1 }).claims.get(key);
  assert.equal(got.holder, "w1");
  assert.equal(hour.requests, 2);
  const second = between(1, async () => unavailable("1"));
  const start = Date.now();
  await client(s, { fetch: second.fetch, attempts: 2, backoffMs: 1, maxBackoffMs: 3_600_000 }).claims.get(key);
  const took = Date.now() - start;
  assert.ok(took >= 1000 && second.requests === 2, `Retry-After 1: the retry after ${took} ms, ${second.requests} requests; want at least 1000 ms, 2`);
});

// What stands between the server and the client: a proxy's 503 page
// (no problem body) is an UnavailableProblem; attempts bounds the
// requests exactly, 5 by default; a call aborted during its last
// attempt throws the signal's reason, never a TransportError.
onEach("answers between the server and the client", async (_t, _rf, s) => {
  const page = between(3, async () => new Response("<html><body>Service Unavailable</body></html>", { status: 503, headers: { "Content-Type": "text/html" } }));
  const err = await rejects(client(s, { fetch: page.fetch, attempts: 3, backoffMs: 1 }).claims.get(unique("page")), UnavailableProblem);
  assert.equal(err.status, 503);
  assert.equal(page.requests, 3);

  const refused = between(100, async () => { throw new TypeError("fetch failed: connection refused"); });
  await rejects(client(s, { fetch: refused.fetch, backoffMs: 1, maxBackoffMs: 1 }).claims.get(unique("down")), TransportError);
  assert.equal(refused.requests, 5, "the default attempts");

  const ac = new AbortController();
  const reason = new Error("the caller gave up");
  const aborting = between(1, async () => {
    ac.abort(reason);
    throw new TypeError("fetch failed: aborted");
  });
  await assert.rejects(client(s, { fetch: aborting.fetch, attempts: 1 }).claims.get(unique("gone"), { signal: ac.signal }), (e) => e === reason);
});
