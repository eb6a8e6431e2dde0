// The route families' classes (events, sequences, tokens, quotas, audit,
// outbox, inbox) against live servers on each engine: their answers, a
// refusal of each family thrown as its typed problem, and an idempotent
// replay of each (the same Idempotency-Key gets the same answer, the
// operation done once).
import assert from "node:assert/strict";
import {
  BadSignatureProblem,
  InvalidInputProblem,
  NotFoundProblem,
  NotHeldProblem,
  QuotaExceededProblem,
  StaleFenceProblem,
  TokenReusedProblem,
  TokenRevokedProblem,
  TokenUsedProblem,
  TransportError,
  UnknownSourceProblem,
  type QuotaPolicy,
} from "../src/index.js";
import { client, onEach, Recorder, sign, unique } from "./servers.js";

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

/** until calls get until ok holds of its answer, and returns that answer; the test's timeout bounds it. */
async function until<T>(get: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  for (;;) {
    const v = await get();
    if (ok(v)) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
}

onEach("events: one observer per window, a replay the same observation counted once, the result under the fence", async (_t, rf) => {
  const fingerprint = unique("fp");
  const ev = { source: "ts", level: "error", message: "boom", fingerprint };
  const key = unique("observe");
  const won = await rf.events.observe(ev, { windowMs: 60_000, key });
  assert.equal(won.fingerprint, fingerprint);
  assert.equal(won.process, true);
  assert.equal(won.fence, 1);
  assert.equal(won.count, 1);
  assert.deepEqual(await rf.events.observe(ev, { windowMs: 60_000, key }), won, "the same key: the same observation");
  const lost = await rf.events.observe(ev, { windowMs: 60_000 });
  assert.equal(lost.process, false);
  assert.equal(lost.count, 2, "the replay was not counted");

  const recorded = await rf.events.record(fingerprint, won.fence, { classification: "bug", external_id: "JIRA-1" });
  assert.deepEqual(recorded, { fingerprint, fence: 1, classification: "bug", external_id: "JIRA-1" });
  await rejects(rf.events.record(fingerprint, 9), NotHeldProblem);
  await rejects(rf.events.record(unique("none"), 1), NotFoundProblem);
  await rejects(rf.events.observe({ source: "", level: "error", message: "boom" }), InvalidInputProblem);

  assert.deepEqual(await rf.events.get(fingerprint), {
    fingerprint, source: "ts", level: "error", message: "boom", classification: "bug", external_id: "JIRA-1", result_fence: 1,
  });
  await rejects(rf.events.get(unique("none")), NotFoundProblem);
});

onEach("events: a later window won makes the earlier fence stale", async (_t, rf) => {
  const fingerprint = unique("fp");
  const ev = { source: "ts", level: "warn", message: "slow", fingerprint };
  const first = await rf.events.observe(ev, { windowMs: 1 });
  assert.equal(first.fence, 1);
  const next = await until(() => rf.events.observe(ev, { windowMs: 1 }), (o) => o.process);
  assert.equal(next.fence, 2);
  const stale = await rejects(rf.events.record(fingerprint, first.fence, { classification: "late" }), StaleFenceProblem);
  assert.equal(stale.status, 409);
  assert.equal(stale.currentFence, 2);
});

onEach("sequences: gapless numbers, a replay the same numbers, n out of range refused", async (_t, rf) => {
  const name = unique("seq");
  const three = await rf.sequences.next("ts", name, 3);
  assert.deepEqual(three, { scope: "ts", name, first: 1, last: 3 });
  const key = unique("next");
  const four = await rf.sequences.next("ts", name, 1, { key });
  assert.deepEqual([four.first, four.last], [4, 4]);
  assert.deepEqual(await rf.sequences.next("ts", name, 1, { key }), four, "the same key: the same numbers");
  assert.deepEqual([(await rf.sequences.next("ts", name)).first], [5], "none consumed by the replay, none skipped");
  const bad = await rejects(rf.sequences.next("ts", name, 0), InvalidInputProblem);
  assert.equal(bad.status, 400);
  assert.equal((await rf.sequences.next("ts", name)).first, 6, "the refusal consumed nothing");
  assert.deepEqual(await rf.sequences.current("ts", name), { scope: "ts", name, current: 6 });
  const fresh = unique("seq");
  assert.equal((await rf.sequences.current("ts", fresh)).current, 0, "none handed out yet");
  assert.equal((await rf.sequences.next("ts", fresh)).first, 1, "reading created nothing");
});

onEach("sequences: a reply lost is retried with the same key and answered with the same numbers", async (_t, _rf, s) => {
  const rec = new Recorder();
  const rf = client(s, { fetch: rec.fetch });
  const name = unique("seq");
  rec.loseReplies = 1;
  const got = await rf.sequences.next("ts", name, 2);
  assert.deepEqual([got.first, got.last], [1, 2]);
  assert.equal(rec.keys.length, 2);
  assert.ok(rec.keys[0] && rec.keys[0] === rec.keys[1], `one key for both attempts: ${rec.keys}`);
  assert.equal((await rf.sequences.next("ts", name)).first, 3);
});

onEach("tokens: a code consumed once (a replay the same answer), a reused refresh token revokes its family", async (_t, _rf, s) => {
  const rec = new Recorder();
  const rf = client(s, { fetch: rec.fetch });
  const code = await rf.tokens.issueCode("login", "u1", 60_000);
  assert.equal(code.kind, "code");
  assert.equal(code.subject, "u1");
  assert.ok(code.token.length > 0);
  const key = unique("consume");
  const used = await rf.tokens.consume("login", code.token, { key });
  assert.equal(used.outcome, "consumed");
  assert.equal(used.subject, "u1");
  assert.deepEqual(await rf.tokens.consume("login", code.token, { key }), used, "the same key: the same answer");
  const again = await rejects(rf.tokens.consume("login", code.token), TokenUsedProblem);
  assert.equal(again.members.outcome, "already_used");

  const family = await rf.tokens.issueRefresh("u2", 60_000);
  assert.equal(family.kind, "refresh");
  const next = await rf.tokens.rotate(family.token);
  assert.equal(next.outcome, "rotated");
  assert.equal(next.subject, "u2");
  assert.notEqual(next.token, family.token);
  const reused = await rejects(rf.tokens.rotate(family.token), TokenReusedProblem);
  assert.equal(reused.members.outcome, "reused");
  await rejects(rf.tokens.rotate(next.token), TokenRevokedProblem);

  // The routes that answer with a token take no Idempotency-Key; consume carries one.
  const sent = (path: string) => rec.requests.filter((r) => r.path === path).map((r) => r.key);
  assert.ok(sent("/v1/tokens").length === 2 && sent("/v1/tokens").every((k) => k === null), `issue: ${sent("/v1/tokens")}`);
  assert.ok(sent("/v1/tokens/rotate").length === 3 && sent("/v1/tokens/rotate").every((k) => k === null));
  assert.ok(sent("/v1/tokens/consume").every((k) => k !== null));
});

onEach("tokens: a rotation whose reply was lost is not sent again", async (_t, rf, s) => {
  const family = await rf.tokens.issueRefresh("u3", 60_000);
  const rec = new Recorder();
  const lossy = client(s, { fetch: rec.fetch });
  rec.loseReplies = 1;
  await rejects(lossy.tokens.rotate(family.token), TransportError);
  assert.equal(rec.keys.length, 1);
});

onEach("quotas: exactly the limit admitted, a replay charged once, a denial a QuotaExceededProblem", async (_t, rf) => {
  const quota = unique("quota");
  const policy: QuotaPolicy = { kind: "window", rate: 3, per_ms: 60_000 };
  const key = unique("consume");
  const first = await rf.quotas.consume(quota, policy, 1, { key });
  assert.equal(first.allowed, true);
  assert.equal(first.remaining, 2);
  assert.ok(Date.parse(first.reset_at) > Date.now() - 1000, first.reset_at);
  assert.deepEqual(await rf.quotas.consume(quota, policy, 1, { key }), first, "the same key: the same decision");
  assert.equal((await rf.quotas.consume(quota, policy, 2)).remaining, 0, "the replay charged nothing");
  const denied = await rejects(rf.quotas.consume(quota, policy), QuotaExceededProblem);
  assert.equal(denied.status, 429);
  assert.equal(denied.remaining, 0);
  assert.ok(denied.retryAfterMs! > 0 && denied.retryAfterMs! <= 60_000, `retry_after_ms ${denied.retryAfterMs}`);
  assert.ok(denied.resetAt instanceof Date);
  await rejects(rf.quotas.consume(quota, { kind: "gcra", rate: 1, per_ms: 1000 }), InvalidInputProblem); // gcra needs a burst
});

onEach("audit: append (a replay the same entry), list page by page, checkpoint, latest, verify", async (_t, rf) => {
  const scope = unique("audit");
  await rejects(rf.audit.latestCheckpoint(scope), NotFoundProblem);
  const key = unique("append");
  const created = await rf.audit.append(scope, { actor: "ts", action: "create", subject: "order-1", data: { n: 1 } }, { key });
  assert.equal(created.seq, 1);
  assert.equal(created.scope, scope);
  assert.deepEqual(created.data, { n: 1 });
  assert.deepEqual(
    await rf.audit.append(scope, { actor: "ts", action: "create", subject: "order-1", data: { n: 1 } }, { key }),
    created,
    "the same key: the same entry",
  );
  for (const action of ["update", "delete"]) await rf.audit.append(scope, { actor: "ts", action });

  const actions: string[] = [];
  let after: string | undefined;
  for (let pages = 0; ; pages++) {
    assert.ok(pages <= 2, "two pages of two hold three entries");
    const page = await rf.audit.list(scope, { after, limit: 2 });
    if (page.entries.length === 0) {
      assert.equal(page.next, after, "next is unchanged when there was nothing more");
      break;
    }
    actions.push(...page.entries.map((e) => e.action));
    after = page.next;
  }
  assert.deepEqual(actions, ["create", "update", "delete"], "each entry once: the replay appended nothing");

  const cp = await rf.audit.checkpoint(scope);
  assert.equal(cp.scope, scope);
  assert.equal(cp.seq, 3);
  const latest = await rf.audit.latestCheckpoint(scope);
  assert.deepEqual([latest.seq, latest.sig, latest.mac], [cp.seq, cp.sig, cp.mac]);
  const verified = await rf.audit.verify(scope);
  assert.equal(verified.intact, true);
  assert.equal(verified.anchored, true);
  assert.equal(verified.rows, 3);
  await rejects(rf.audit.append(scope, { actor: "ts", action: "racefree.audit.pruned" }), InvalidInputProblem);
});

onEach("outbox: enqueue (a replay the same id), stats, dead letters page by page, redrive, discard", async (_t, rf, s) => {
  const message = { topic: unique("topic"), key: "order-1", payload: { n: 1 } };
  const key = unique("enqueue");
  const queued = await rf.outbox.enqueue(message, { key });
  assert.ok(queued.id > 0);
  assert.equal(queued.topic, message.topic);
  assert.equal(queued.idempotency_key, String(queued.id));
  assert.deepEqual(await rf.outbox.enqueue(message, { key }), queued, "the same key: the same id");
  assert.ok((await rf.outbox.stats()).backlog >= 1);

  // Three messages the relay delivers to a sink that refuses them: they die.
  const order = unique("dead");
  const ids: number[] = [];
  for (let i = 0; i < 3; i++) ids.push((await rf.outbox.enqueue({ topic: s.dead_topic, key: order, payload: { i }, max_attempts: 1 })).id);
  await until(() => rf.outbox.dead({ topic: s.dead_topic, key: order }), (p) => p.messages.length === 3);
  const first = await rf.outbox.dead({ topic: s.dead_topic, key: order, limit: 2 });
  const second = await rf.outbox.dead({ topic: s.dead_topic, key: order, limit: 2, after: first.next });
  assert.deepEqual([...first.messages, ...second.messages].map((m) => m.id), ids);
  assert.deepEqual(second.messages[0]!.payload, { i: 2 });
  assert.match(second.messages[0]!.last_error, /422/);
  const stored = await rf.outbox.message(ids[2]!);
  assert.equal(stored.state, "dead");
  assert.deepEqual(stored.payload, { i: 2 });
  assert.equal(stored.history.length, 1);
  assert.equal(stored.history[0]!.outcome, "dead");
  assert.match(stored.history[0]!.error, /422/);
  assert.equal((await rf.outbox.message(queued.id)).state === "dead", false, "a message not dead reads in its own state");
  await rejects(rf.outbox.message(999_999_999), NotFoundProblem);
  assert.ok((await rf.outbox.stats()).dead >= 3);

  const redriveKey = unique("redrive");
  const redriven = await rf.outbox.redrive(ids[0]!, { key: redriveKey });
  assert.deepEqual(redriven, { id: ids[0], state: "ready" });
  assert.deepEqual(await rf.outbox.redrive(ids[0]!, { key: redriveKey }), redriven, "the same key: the same answer");
  assert.deepEqual(await rf.outbox.discard(ids[1]!), { id: ids[1], state: "discarded" });
  await rejects(rf.outbox.discard(ids[1]!), NotFoundProblem);
  await rejects(rf.outbox.redrive(999_999_999), NotFoundProblem);
});

onEach("inbox: deliveries received once, listed page by page; a bad signature and an unknown source refused", async (_t, rf, s) => {
  const ids = [unique("msg"), unique("msg"), unique("msg")];
  for (const id of [...ids, ids[0]!]) {
    const body = JSON.stringify({ type: "order.paid", id });
    await rf.inbox.deliver(s.inbox_source, sign(s.inbox_secret, id, body), body); // the last a redelivery, acknowledged
  }
  const forged = sign(s.inbox_secret, unique("msg"), "{}");
  await rejects(rf.inbox.deliver(s.inbox_source, forged, '{"forged":true}'), BadSignatureProblem);

  const seen: { id: string; status: string; payload: unknown }[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await rf.inbox.list(s.inbox_source, { after, limit: 2 });
    if (page.events.length === 0) break;
    assert.ok(page.events.length <= 2);
    seen.push(...page.events.filter((e) => ids.includes(e.id)));
    after = page.next;
  }
  assert.deepEqual(seen.map((e) => e.id), ids, "each delivery once, oldest first");
  assert.deepEqual(seen[0]!.payload, { type: "order.paid", id: ids[0] });
  await rejects(rf.inbox.list(unique("nosuchsource")), UnknownSourceProblem);
});
