// A whole 2xx reply that is not the route's answer (a proxy's HTML page
// answered 200, a blank 200, JSON that is not an object) is a DecodeError
// after one request: the server answered, and may have done the work, so
// a retry could do it twice. A reply cut short while its body was read
// is no answer, and is retried as a lost reply. Each test talks to a live
// server through a proxy of its own on loopback, which forwards each
// request to the server and shapes the reply it writes back byte by byte.
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import type { TestContext } from "node:test";
import { DecodeError, RacefreeProblem, TransportError } from "../src/index.js";
import { client, onEach, unique, type LiveServer } from "./servers.js";

/** Forwarded is the live server's answer to one request the proxy forwarded. */
interface Forwarded {
  status: number;
  contentType: string;
  requestId: string;
  body: string;
}

/** Shape writes the reply of the n-th request (from 1) to socket: forward sends the request on to the server first. */
type Shape = (n: number, forward: () => Promise<Forwarded>, socket: Socket) => Promise<void>;

/**
 * proxy listens on loopback and answers each request as shape writes it;
 * requests counts them, and keys holds each one's Idempotency-Key. It
 * closes when the test ends.
 */
async function proxy(t: TestContext, s: LiveServer, shape: Shape) {
  const p = { url: "", requests: 0, keys: [] as (string | null)[] };
  const server = createServer((socket) => {
    let buf = Buffer.alloc(0);
    let taken = false;
    socket.on("error", () => {});
    socket.on("data", (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf("\r\n\r\n");
      if (taken || end < 0) return;
      const [start = "", ...lines] = buf.subarray(0, end).toString("latin1").split("\r\n");
      const headers = new Map(lines.map((l) => [l.slice(0, l.indexOf(":")).trim().toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      const length = Number(headers.get("content-length") ?? 0);
      if (buf.length < end + 4 + length) return;
      taken = true;
      const [method = "", path = ""] = start.split(" ");
      const body = buf.subarray(end + 4, end + 4 + length).toString("utf8");
      const n = ++p.requests;
      p.keys.push(headers.get("idempotency-key") ?? null);
      const forward = async (): Promise<Forwarded> => {
        const sent: Record<string, string> = {};
        for (const name of ["authorization", "content-type", "accept", "idempotency-key"]) {
          const v = headers.get(name);
          if (v !== undefined) sent[name] = v;
        }
        const r = await fetch(s.url + path, { method, headers: sent, ...(length > 0 ? { body } : {}) });
        return { status: r.status, contentType: r.headers.get("Content-Type") ?? "", requestId: r.headers.get("X-Request-Id") ?? "", body: await r.text() };
      };
      shape(n, forward, socket).catch((err) => socket.destroy(err));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const addr = server.address();
  assert.ok(addr !== null && typeof addr === "object");
  p.url = `http://127.0.0.1:${addr.port}`;
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return p;
}

/** head is an HTTP/1.1 reply's status line and headers, the connection closed after it. */
function head(status: number, headers: Record<string, string | number>): string {
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  return `HTTP/1.1 ${status} ${status === 200 ? "OK" : "Status"}\r\n${lines.join("")}Connection: close\r\n\r\n`;
}

/** whole writes the server's answer as it was, with its length. */
function whole(f: Forwarded, socket: Socket): void {
  socket.end(head(f.status, { "Content-Type": f.contentType, "Content-Length": Buffer.byteLength(f.body), "X-Request-Id": f.requestId }) + f.body);
}

/** page is a gateway's HTML page of 200, longer than a DecodeError keeps. */
const page = `<!DOCTYPE html><html><head><title>Portal</title></head><body>${"<p>Please sign in to continue.</p>".repeat(40)}</body></html>`;

/** html forwards each request, and answers the server's answer with the page, status 200, and the server's X-Request-Id. */
const html: Shape = async (_n, forward, socket) => {
  const f = await forward();
  socket.end(head(200, { "Content-Type": "text/html; charset=utf-8", "Content-Length": Buffer.byteLength(page), "X-Request-Id": f.requestId }) + page);
};

onEach("decode: a claim acquire answered 200 with a proxy's HTML page is a DecodeError after one request, and the server did take the claim", async (t, rf, s) => {
  const p = await proxy(t, s, html);
  const key = unique("html");
  const err = await rejectsWith(client(s, { baseUrl: p.url }).claims.acquire(key, "worker-1", 60_000), DecodeError);
  assert.equal(p.requests, 1, "a whole reply is not retried");
  assert.equal(err.status, 200);
  assert.equal(err.contentType, "text/html; charset=utf-8");
  assert.match(err.requestId ?? "", /.+/, "the server's X-Request-Id, for its logs");
  assert.equal(err.method, "POST");
  assert.equal(err.path, `/v1/claims/${encodeURIComponent(key)}`);
  assert.equal(err.body.length, 256, "at most 256 characters of the body");
  assert.equal(err.body, page.slice(0, 256));
  assert.ok(err.cause instanceof SyntaxError, String(err.cause));
  assert.ok(!(err instanceof TransportError) && !(err instanceof RacefreeProblem));
  assert.ok(err.message.includes(err.requestId!), err.message);
  const held = await rf.claims.get(key);
  assert.equal(held.holder, "worker-1", "the server did the work the page hid");
  assert.equal(held.fence, 1);
});

onEach("decode: a one-time code issued behind a 200 HTML page is a DecodeError after one request, never a TransportError", async (t, _rf, s) => {
  const p = await proxy(t, s, html);
  await rejectsWith(client(s, { baseUrl: p.url }).tokens.issueCode("login", unique("u"), 60_000), DecodeError);
  assert.equal(p.requests, 1);
});

onEach("decode: a blank 200 is a DecodeError after one request", async (t, rf, s) => {
  const p = await proxy(t, s, async (_n, forward, socket) => {
    await forward();
    socket.end(head(200, { "Content-Type": "application/json", "Content-Length": 0 }));
  });
  const key = unique("blank");
  const err = await rejectsWith(client(s, { baseUrl: p.url }).claims.acquire(key, "worker-1", 60_000), DecodeError);
  assert.equal(p.requests, 1);
  assert.equal(err.body, "");
  assert.equal(err.contentType, "application/json");
  assert.equal(err.requestId, undefined);
  assert.equal((await rf.claims.get(key)).holder, "worker-1");
});

onEach("decode: JSON that is not an object (an array, a string, a number, null) is a DecodeError after one request", async (t, rf, s) => {
  const key = unique("shape");
  await rf.claims.acquire(key, "worker-1", 60_000);
  for (const body of ["[]", '"ok"', "42", "null"]) {
    const p = await proxy(t, s, async (_n, forward, socket) => {
      await forward();
      socket.end(head(200, { "Content-Type": "application/json", "Content-Length": body.length }) + body);
    });
    const err = await rejectsWith(client(s, { baseUrl: p.url }).claims.get(key), DecodeError);
    assert.equal(p.requests, 1, body);
    assert.equal(err.body, body);
  }
});

onEach("decode: a reply cut in the middle of its body is retried with the same key, and the retry gets the claim", async (t, _rf, s) => {
  const p = await proxy(t, s, async (n, forward, socket) => {
    const f = await forward();
    if (n > 1) return whole(f, socket);
    // The declared length is the whole body's; half of it is sent, and
    // the connection is cut.
    socket.write(head(f.status, { "Content-Type": f.contentType, "Content-Length": Buffer.byteLength(f.body) }) + f.body.slice(0, f.body.length >> 1));
    socket.destroy();
  });
  const key = unique("cut");
  const claim = await client(s, { baseUrl: p.url }).claims.acquire(key, "worker-1", 60_000);
  assert.equal(p.requests, 2, "the cut reply was retried");
  assert.equal(p.keys[0], p.keys[1], "with the same Idempotency-Key");
  assert.equal(claim.holder, "worker-1");
  assert.equal(claim.fence, 1, "the retry was answered with the claim the first attempt took");
});

onEach("decode: a reply of no declared length whose JSON ends early ends where its connection closed: it is retried", async (t, _rf, s) => {
  const p = await proxy(t, s, async (n, forward, socket) => {
    const f = await forward();
    if (n === 1) return void socket.end(head(f.status, { "Content-Type": f.contentType }) + f.body.slice(0, f.body.length >> 1));
    if (n === 2) return void socket.end(head(f.status, { "Content-Type": f.contentType }));
    whole(f, socket);
  });
  const key = unique("close");
  const claim = await client(s, { baseUrl: p.url }).claims.acquire(key, "worker-1", 60_000);
  assert.equal(p.requests, 3, "a body cut before its JSON ends and an empty one are lost replies");
  assert.equal(claim.fence, 1);
});

onEach("decode: a reply cut short on every attempt is a TransportError after the attempts", async (t, rf, s) => {
  const key = unique("never");
  await rf.claims.acquire(key, "worker-1", 60_000);
  const p = await proxy(t, s, async (_n, forward, socket) => {
    const f = await forward();
    socket.write(head(f.status, { "Content-Type": f.contentType, "Content-Length": Buffer.byteLength(f.body) + 10 }) + f.body);
    socket.destroy();
  });
  await rejectsWith(client(s, { baseUrl: p.url, attempts: 3 }).claims.get(key), TransportError);
  assert.equal(p.requests, 3);
});

/** rejectsWith awaits promise's rejection, asserts it is an instance of Class, and returns it. */
async function rejectsWith<E extends Error>(promise: Promise<unknown>, Class: new (...args: never[]) => E): Promise<E> {
  let caught: unknown;
  await assert.rejects(promise, (err) => {
    caught = err;
    return true;
  });
  assert.ok(caught instanceof Class, `want a ${Class.name}, got ${caught instanceof Error ? `${caught.name}: ${caught.message}` : String(caught)}`);
  return caught;
}
