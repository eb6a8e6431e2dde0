// The client's edges, a second round from outside its code (2800 to
// 2824): which answers are retried and which are thrown at once (a 409
// in progress, a 500, a 429), the backoff's growth, bounds and default,
// what the caller's signal does to the wait between attempts, a release
// refused not-held after a lost attempt, the Idempotency-Key's exact
// character and length bounds, an https base URL, the problem mapped
// from an answer that is not a problem document, the heartbeat's deadline
// for a retry and a renewal in flight, and the route families' defaults
// and retries (observe's windowMs of 0, deliver and discard after a lost
// reply). Most run against answers the test's own fetch makes, with no
// server; the rest against live servers on each engine.
import assert from "node:assert/strict";
import { test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import {
  ClaimLapsedError,
  createClient,
  idempotencyHeader,
  InternalProblem,
  InvalidInputProblem,
  keep,
  NotHeldProblem,
  OutcomeUnknownError,
  QuotaExceededProblem,
  RacefreeProblem,
  UnavailableProblem,
  type ClientOptions,
} from "../src/index.js";
import { client, onEach, Recorder, sign, unique } from "./servers.js";

/** problem is a problem answer of status and type name, with extra members and headers. */
function problem(status: number, name: string, members: Record<string, unknown> = {}, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ type: `urn:racefree:problem:${name}`, title: name, status, ...members }), {
    status,
    headers: { "Content-Type": "application/problem+json", ...headers },
  });
}

/**
 * scripted is a fetch that answers the i-th request with answers[i] (the
 * last one again past the end), without any server, and counts them.
 */
function scripted(...answers: ((request: Request) => Response | Promise<Response>)[]) {
  const f = {
    requests: 0,
    fetch: async (request: Request): Promise<Response> => {
      const answer = answers[Math.min(f.requests, answers.length - 1)]!;
      f.requests++;
      return answer(request);
    },
  };
  return f;
}

/** offline is a client of no server: every request goes to fetch. */
function offline(fetch: (request: Request) => Promise<Response>, options?: Partial<ClientOptions>) {
  return createClient({ baseUrl: "http://racefree.invalid", apiKey: "k", backoffMs: 1, maxBackoffMs: 5, fetch, ...options });
}

/** failure awaits p's failure and returns it. */
async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => assert.fail(`want a failure, got ${JSON.stringify(v)}`),
    (e: unknown) => e,
  );
}

const claim = { key: "k", holder: "a", fence: 1, expires_at: "2030-01-01T00:00:00.000Z", live: true };
const ok = () => new Response(JSON.stringify(claim), { status: 200, headers: { "Content-Type": "application/json" } });

// Retried: a 503 and a 409 in progress (the first attempt of the same
// key still runs: waiting gets its answer). Thrown at once: a 500 (the
// server failed on the request) and a 429 (the caller waits retryAfterMs).
test("outside2: a 409 in progress is retried; a 500 and a 429 are thrown after one request", async () => {
  const busy = scripted(() => problem(409, "idempotency-in-progress"), ok);
  assert.equal((await offline(busy.fetch).claims.acquire("k", "a", 30_000)).fence, 1);
  assert.equal(busy.requests, 2, "the 409 in progress retried");

  const broken = scripted(() => problem(500, "internal"));
  const internal = await failure(offline(broken.fetch).claims.get("k"));
  assert.ok(internal instanceof InternalProblem, String(internal));
  assert.equal(broken.requests, 1, "a 500 is not retried");

  const denied = scripted(() => problem(429, "quota-exceeded", { retry_after_ms: 1, remaining: 0 }));
  const refusal = await failure(offline(denied.fetch).quotas.consume("q", { kind: "window", rate: 1, per_ms: 1000 }));
  assert.ok(refusal instanceof QuotaExceededProblem, String(refusal));
  assert.equal(denied.requests, 1, "a quota denial is not retried");
});

// The waits are lower bounds, which a slow machine only lengthens: 100,
// 200, 400, 800 ms doubling (1.5 s; growing by 100 ms it is 1 s).
test("outside2: the backoff doubles with each attempt", async () => {
  const down = scripted(() => new Response("down", { status: 503 }));
  const start = Date.now();
  const err = await failure(offline(down.fetch, { attempts: 5, backoffMs: 100, maxBackoffMs: 60_000 }).claims.get("k"));
  const took = Date.now() - start;
  assert.ok(err instanceof UnavailableProblem, String(err));
  assert.equal(down.requests, 5);
  assert.ok(took >= 1490, `five attempts after ${took} ms; want at least 100 + 200 + 400 + 800`);
});

// A Retry-After shorter than the backoff does not cut it short: the wait
// is the longer of the two. A long one is bounded by maxBackoffMs, 2 s
// by default.
test("outside2: a Retry-After shorter than the backoff waits the backoff; a long one the default 2 s", async () => {
  const soon = scripted(() => problem(503, "unavailable", {}, { "Retry-After": "1" }), ok);
  let start = Date.now();
  await offline(soon.fetch, { attempts: 2, backoffMs: 1500, maxBackoffMs: 60_000 }).claims.get("k");
  let took = Date.now() - start;
  assert.ok(took >= 1490, `Retry-After 1 under a backoff of 1500 ms: the retry after ${took} ms`);

  const hour = scripted(() => problem(503, "unavailable", {}, { "Retry-After": "3600" }), ok);
  start = Date.now();
  await createClient({ baseUrl: "http://racefree.invalid", fetch: hour.fetch, attempts: 2, backoffMs: 1 }).claims.get("k");
  took = Date.now() - start;
  assert.equal(hour.requests, 2);
  assert.ok(took >= 1990 && took < 10_000, `Retry-After 3600 under the default maxBackoffMs: the retry after ${took} ms; want 2 s`);
});

// The caller's signal ends the wait between attempts, whether it is
// aborted during the wait or during the attempt answered 503 before it
// (its abort event then fired already). Each would otherwise wait the
// whole 8 s.
test("outside2: a signal aborted during or just before the wait between attempts ends the call at once", async () => {
  for (const during of [true, false]) {
    const ac = new AbortController();
    const reason = new Error(`the caller gave up (${during ? "during the wait" : "during the attempt"})`);
    const f = scripted(() => {
      if (during) setTimeout(() => ac.abort(reason), 50);
      else ac.abort(reason);
      return problem(503, "unavailable", {}, { "Retry-After": "3600" });
    });
    const start = Date.now();
    const err = await failure(offline(f.fetch, { attempts: 2, maxBackoffMs: 8_000 }).claims.get("k", { signal: ac.signal }));
    const took = Date.now() - start;
    assert.equal(err, reason, String(err));
    assert.equal(f.requests, 1);
    assert.ok(took < 4_000, `aborted ${during ? "during" : "before"} the wait: rejected after ${took} ms`);
  }
});

// A release whose first attempt got no answer, refused not-held by the
// retry: the lost attempt may itself have released the claim (and the
// key lapsed or was reaped since), so the outcome is unknown.
test("outside2: a release refused not-held after an attempt with no answer is an unknown outcome", async () => {
  const f = scripted(
    () => {
      throw new TypeError("fetch failed: the reply was lost");
    },
    () => problem(409, "not-held"),
  );
  const err = await failure(offline(f.fetch).claims.release("k", "a", 1));
  assert.ok(err instanceof OutcomeUnknownError, String(err));
  assert.ok(err.cause instanceof NotHeldProblem, String(err.cause));
  assert.equal(f.requests, 2);

  const once = scripted(() => problem(409, "not-held"));
  assert.ok((await failure(offline(once.fetch).claims.release("k", "a", 1))) instanceof NotHeldProblem, "refused at once: the refusal itself");
});

test("outside2: an Idempotency-Key is 1 to 255 characters from space to tilde", () => {
  assert.equal(idempotencyHeader("k"), '"k"');
  assert.equal(idempotencyHeader("order 42"), '"order 42"');
  assert.equal(idempotencyHeader(" ~"), '" ~"');
  for (const bad of ["\x7f", "k\x7f", "\x1f", "k\u00e9"]) {
    assert.throws(() => idempotencyHeader(bad), RangeError, JSON.stringify(bad));
  }
});

test("outside2: an https base URL is accepted, another scheme refused", () => {
  assert.ok(createClient({ baseUrl: "https://racefree.example" }));
  assert.ok(createClient({ baseUrl: "https://racefree.example/prefix/" }));
  for (const bad of ["ftp://racefree.example", "racefree.example", "file:///tmp"]) {
    assert.throws(() => createClient({ baseUrl: bad }), TypeError, bad);
  }
});

// What stands between the server and the client answers in its own way:
// a JSON error without a type is no problem document (about:blank, named
// so), and an answer's X-Request-Id is the request's id when the body
// has none. An empty detail is none: the message says the title.
test("outside2: a JSON error without a type is about:blank; the request id from the header; an empty detail is none", async () => {
  const gateway = scripted(
    () => new Response(JSON.stringify({ error: "bad gateway" }), { status: 502, statusText: "Bad Gateway", headers: { "Content-Type": "application/json", "X-Request-Id": "req-502" } }),
  );
  const err = await failure(offline(gateway.fetch).claims.get("k"));
  assert.ok(err instanceof RacefreeProblem, String(err));
  assert.equal(err.constructor, RacefreeProblem);
  assert.equal(err.type, "about:blank");
  assert.equal(err.problemName, "about:blank");
  assert.equal(err.status, 502);
  assert.equal(err.title, "Bad Gateway");
  assert.equal(err.requestId, "req-502");

  const other = new RacefreeProblem({ type: "urn:example:problem:x", title: "x", status: 400 });
  assert.equal(other.problemName, "urn:example:problem:x", "another URN is named in full");

  const terse = scripted(() => problem(409, "not-held", { title: "Not held", detail: "" }));
  const p = await failure(offline(terse.fetch).claims.renew("k", "a", 1, 1000));
  assert.ok(p instanceof NotHeldProblem, String(p));
  assert.equal(p.detail, undefined);
  assert.equal(p.message, "racefree server: 409 Not held");
});

// retryAfterMs: the member retry_after_ms whenever it is a number, 0
// included; else Retry-After in whole seconds; an HTTP date is not read.
test("outside2: retryAfterMs is retry_after_ms even when 0, and none for a Retry-After date", async () => {
  const now = scripted(() => problem(429, "quota-exceeded", { retry_after_ms: 0, remaining: 0 }, { "Retry-After": "1" }));
  const denied = await failure(offline(now.fetch).quotas.consume("q", { kind: "window", rate: 1, per_ms: 1000 }));
  assert.ok(denied instanceof QuotaExceededProblem, String(denied));
  assert.equal(denied.retryAfterMs, 0);

  const dated = scripted(() => problem(503, "unavailable", {}, { "Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT" }));
  const down = await failure(offline(dated.fetch, { attempts: 1 }).claims.get("k"));
  assert.ok(down instanceof UnavailableProblem, String(down));
  assert.equal(down.retryAfterMs, undefined);
});

// A failed renewal is retried no later than the lease's deadline: one
// that fails 300 ms before it is retried at it, and the lapse reported
// then (a retry a tenth of the TTL later reports it 1,700 ms late; the
// second of slack is for a loaded machine's timers, and a failure that
// comes past the deadline on one is reported at once).
test("outside2: keep: a retry waits no longer than the lease's deadline", { timeout: 60_000 }, async () => {
  const ttl = 20_000;
  const started = Date.now();
  const deadline = started + ttl;
  const kept = keep("k", 1, ttl, () =>
    new Promise((_, reject) => setTimeout(() => reject(new TypeError("fetch failed: connection refused")), Math.max(0, deadline - 300 - Date.now()))),
  );
  const reason = await kept.done;
  const late = Date.now() - deadline;
  assert.ok(reason instanceof ClaimLapsedError, String(reason));
  assert.ok(late < 1000, `the lapse reported ${late} ms after the lease's deadline`);
});

// A renewal in flight ends at the lease's deadline (ttl after the last
// success was sent; here the start), not a whole TTL after its own send
// (a third of the TTL, 2 s, later; the second of slack is for a loaded
// machine's timers).
test("outside2: keep: a renewal that hangs ends at the lease's deadline, not a TTL after it was sent", { timeout: 30_000 }, async () => {
  const ttl = 6000;
  const started = Date.now();
  const kept = keep("k", 3, ttl, (signal) => {
    const open = setInterval(() => {}, 1_000);
    return new Promise((_, reject) =>
      signal.addEventListener("abort", () => {
        clearInterval(open);
        reject(signal.reason);
      }, { once: true }),
    );
  });
  const reason = await kept.done;
  const took = Date.now() - started;
  assert.ok(reason instanceof ClaimLapsedError, String(reason));
  assert.ok(took >= ttl - 5 && took < ttl + 1000, `lapsed after ${took} ms; want the TTL, ${ttl} ms`);
});

// The bound of a renewal in flight is held strongly: AbortSignal.timeout,
// which AbortSignal.any holds weakly, was collected by a garbage
// collection while the renewal hung, so it never ended and the claim's
// lapse was never reported (Node 20; a bug of keep.ts, found by this
// round's tests, which failed so on a loaded machine).
test("outside2: keep: a renewal that hangs ends at the lease's deadline though the garbage collector runs", { timeout: 30_000 }, async () => {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const ttl = 600;
  const started = Date.now();
  const kept = keep("k", 4, ttl, (signal) => {
    const open = setInterval(() => {}, 1_000);
    return new Promise((_, reject) =>
      signal.addEventListener("abort", () => {
        clearInterval(open);
        reject(signal.reason);
      }, { once: true }),
    );
  });
  const churn = setInterval(gc, 20);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("no lapse 10 s after a 600 ms lease: the renewal's bound was collected")), 10_000);
  });
  try {
    const reason = await Promise.race([kept.done, bound]);
    assert.ok(reason instanceof ClaimLapsedError, String(reason));
    assert.ok(Date.now() - started >= ttl - 5);
  } finally {
    clearInterval(churn);
    clearTimeout(timer);
    await kept.stop();
  }
});

// A renewal that rejects with no reason at all failed: it does not move
// the deadline, and the claim lapses.
test("outside2: keep: a renewal rejected with undefined is a failure, and the claim lapses", { timeout: 30_000 }, async () => {
  const kept = keep("k", 1, 300, () => Promise.reject(undefined));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("no lapse 10 s after a 300 ms lease: a renewal rejected with undefined was taken for a success")), 10_000);
  });
  try {
    const reason = await Promise.race([kept.done, bound]);
    assert.ok(reason instanceof ClaimLapsedError, String(reason));
  } finally {
    clearTimeout(timer);
    await kept.stop();
  }
});

onEach("outside2: observe with a windowMs of 0 sends it and is refused, not observed under the default window", async (_t, rf) => {
  const fingerprint = unique("fp");
  const err = await failure(rf.events.observe({ source: "ts", level: "error", message: "boom", fingerprint }, { windowMs: 0 }));
  assert.ok(err instanceof InvalidInputProblem, String(err));
  assert.match(err.detail ?? "", /window_ms/);
});

onEach("outside2: a delivery whose reply was lost is retried and received once", async (_t, rf, s) => {
  const rec = new Recorder();
  const lossy = client(s, { fetch: rec.fetch });
  const id = unique("lost");
  const body = JSON.stringify({ type: "order.paid", id });
  rec.loseReplies = 1;
  await lossy.inbox.deliver(s.inbox_source, sign(s.inbox_secret, id, body), body);
  assert.equal(rec.requests.length, 2, "retried once");
  const seen: string[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await rf.inbox.list(s.inbox_source, { after, limit: 1000 });
    if (page.events.length === 0) break;
    seen.push(...page.events.filter((e) => e.id === id).map((e) => e.status));
    after = page.next;
  }
  assert.deepEqual(seen, ["processed"], "received once");
});

onEach("outside2: a discard whose reply was lost is retried with the same key and answered discarded", async (_t, rf, s) => {
  const dead = await rf.outbox.enqueue({ topic: s.dead_topic, key: unique("discard"), payload: { n: 1 }, max_attempts: 1 });
  for (;;) {
    if ((await rf.outbox.message(dead.id)).state === "dead") break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const rec = new Recorder();
  const lossy = client(s, { fetch: rec.fetch });
  rec.loseReplies = 1;
  assert.deepEqual(await lossy.outbox.discard(dead.id), { id: dead.id, state: "discarded" });
  assert.equal(rec.keys.length, 2);
  assert.ok(rec.keys[0] && rec.keys[0] === rec.keys[1], `one key for both attempts: ${rec.keys}`);
  const gone = await failure(rf.outbox.message(dead.id));
  assert.ok(gone instanceof RacefreeProblem && gone.status === 404, String(gone));
});
