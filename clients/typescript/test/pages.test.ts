// The all() methods page on to the end: across short pages (the server
// cuts a page at 4 MiB of JSON), to the first empty one, stopping when the
// loop is left, throwing a page's error, and refusing a server that does
// not page on rather than reading it for ever.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createClient, UnauthorizedProblem } from "../src/index.js";
import { onEach, sign, unique } from "./servers.js";

/**
 * pager is a fetch serving GET /v1/audit from entries 1 to total, at most
 * two a page whatever the limit asked (as a page the server cut at its
 * byte bound), next the last seq served, or after itself on an empty
 * page; stuck answers every page with entries 1 and 2. It records the
 * query of each request.
 */
function pager(total: number, stuck = false) {
  const queries: string[] = [];
  const fetch = async (request: Request): Promise<Response> => {
    const url = new URL(request.url);
    queries.push(url.search);
    const after = stuck ? 0 : Number(url.searchParams.get("after") ?? "0");
    const seqs = [after + 1, after + 2].filter((s) => s <= total);
    const entries = seqs.map((seq) => ({ seq, scope: "s", actor: "a", action: "put" }));
    const next = String(seqs.length > 0 ? seqs[seqs.length - 1] : after);
    return new Response(JSON.stringify({ entries, next }), { status: 200, headers: { "Content-Type": "application/json" } });
  };
  return { queries, rf: createClient({ baseUrl: "http://racefree.invalid", apiKey: "k", fetch }) };
}

async function seqs(it: AsyncIterable<{ seq: number }>): Promise<number[]> {
  const got: number[] = [];
  for await (const e of it) {
    got.push(e.seq);
    assert.ok(got.length <= 100, `a listing that does not end: ${got.join(",")}`);
  }
  return got;
}

test("all pages on across short pages to the first empty one", async () => {
  const { queries, rf } = pager(5);
  assert.deepEqual(await seqs(rf.audit.all("s")), [1, 2, 3, 4, 5]);
  assert.deepEqual(queries, ["?scope=s&limit=1000", "?scope=s&after=2&limit=1000", "?scope=s&after=4&limit=1000", "?scope=s&after=5&limit=1000"]);
  const after = pager(5);
  assert.deepEqual(await seqs(after.rf.audit.all("s", { after: 2, limit: 1 })), [3, 4, 5]);
  assert.equal(after.queries[0], "?scope=s&after=2&limit=1000");
});

test("all sends no request once its loop is left", async () => {
  const { queries, rf } = pager(5);
  for await (const e of rf.audit.all("s")) {
    assert.equal(e.seq, 1);
    break;
  }
  assert.equal(queries.length, 1);
});

test("all throws when the server does not page on, its items yielded once", async () => {
  const { queries, rf } = pager(5, true);
  const got: number[] = [];
  await assert.rejects(async () => {
    for await (const e of rf.audit.all("s")) {
      got.push(e.seq);
      assert.ok(got.length <= 10, "a listing that does not end");
    }
  }, /does not page on/);
  assert.deepEqual(got, [1, 2]);
  assert.equal(queries.length, 2);
});

onEach("all lists what the server holds", async (_t, rf, s) => {
  const scope = unique("pages");
  for (const action of ["one", "two", "three"]) {
    await rf.audit.append(scope, { actor: "a", action });
  }
  const entries = [];
  for await (const e of rf.audit.all(scope)) entries.push(e.action);
  assert.deepEqual(entries, ["one", "two", "three"]);

  const ids = [unique("evt"), unique("evt")];
  for (const id of ids) {
    const body = JSON.stringify({ id });
    await rf.inbox.deliver(s.inbox_source, sign(s.inbox_secret, id, body), body);
  }
  const seen = [];
  let listed = 0;
  for await (const e of rf.inbox.all(s.inbox_source)) {
    if (ids.includes(e.id)) seen.push(e.id);
    assert.ok(++listed <= 10_000, "a listing that does not end");
  }
  assert.deepEqual(seen, ids);

  const key = unique("order");
  const id = (await rf.outbox.enqueue({ topic: s.dead_topic, key, payload: {}, max_attempts: 1 })).id;
  for (;;) {
    const found = [];
    for await (const m of rf.outbox.allDead({ topic: s.dead_topic, key })) found.push(m.id);
    if (found.length > 0) {
      assert.deepEqual(found, [id]);
      break;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  for await (const m of rf.outbox.allDead({ topic: unique("none") })) assert.fail(`another topic's dead letter ${m.id}`);

  const wrong = createClient({ baseUrl: s.url, apiKey: "wrong", backoffMs: 10, maxBackoffMs: 50 });
  await assert.rejects(async () => {
    for await (const m of wrong.outbox.allDead()) assert.fail(`a wrong key listed ${m.id}`);
  }, UnauthorizedProblem);
});
