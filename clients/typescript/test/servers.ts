// The live racefree serve processes the tests talk to: started by the Go
// test TestTypeScriptClient (go test ./clients/typescript), which passes
// them in RACEFREE_TEST_SERVERS.
import { test, type TestContext } from "node:test";
import { createHmac, randomUUID } from "node:crypto";
import { createClient, type ClientOptions, type RacefreeClient } from "../src/index.js";

export interface LiveServer {
  engine: string;
  url: string;
  token: string;
  read_key: string;
  inbox_source: string;
  inbox_secret: string;
  /** dead_topic is the topic serve's relay delivers to a sink that refuses every message: a message of it dies. */
  dead_topic: string;
}

const raw = process.env.RACEFREE_TEST_SERVERS;
if (!raw) {
  throw new Error("RACEFREE_TEST_SERVERS is not set: run the tests with `go test ./clients/typescript` from the repository's root, which starts racefree serve on each engine");
}
export const servers: LiveServer[] = JSON.parse(raw);

/** onEach declares the test name once per server, with a client holding its token. */
export function onEach(name: string, body: (t: TestContext, rf: RacefreeClient, s: LiveServer) => Promise<void>): void {
  for (const s of servers) {
    test(`${name} (${s.engine})`, { timeout: 60_000 }, (t) => body(t, client(s), s));
  }
}

/** client returns a client of s with its token, and options. */
export function client(s: LiveServer, options?: Partial<ClientOptions>): RacefreeClient {
  return createClient({ baseUrl: s.url, apiKey: s.token, backoffMs: 10, maxBackoffMs: 50, ...options });
}

/** unique returns a name no other test or run uses. */
export function unique(prefix: string): string {
  return `${prefix}-${randomUUID()}`;
}

/** sign returns the Standard Webhooks headers of body, signed with the whsec_ secret. */
export function sign(secret: string, id: string, body: string) {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const ts = Math.floor(Date.now() / 1000).toString();
  const sig = createHmac("sha256", key).update(`${id}.${ts}.${body}`).digest("base64");
  return { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": `v1,${sig}` };
}

/** unavailable is the 503 problem a server answers when it cannot tell (a commit reply it lost), with its Retry-After. */
export function unavailable(retryAfter: string): Response {
  return new Response(JSON.stringify({ type: "urn:racefree:problem:unavailable", title: "unavailable", status: 503 }), {
    status: 503,
    headers: { "Content-Type": "application/problem+json", "Retry-After": retryAfter },
  });
}

/**
 * Recorder is a fetch that forwards to the server and records each
 * request's Idempotency-Key (and path); loseReplies makes it drop that
 * many replies after the server answered them (a lost reply: the server
 * did the work).
 */
export class Recorder {
  keys: (string | null)[] = [];
  /** requests are the path and Idempotency-Key of each request, in order. */
  requests: { path: string; key: string | null }[] = [];
  loseReplies = 0;
  /** lostAs503 answers a lost reply 503, as a server whose commit reply was lost does, instead of failing the fetch. */
  lostAs503 = false;
  /** between runs after a reply was lost, before the retry goes out. */
  between: () => Promise<void> = async () => {};
  fetch = async (request: Request): Promise<Response> => {
    this.keys.push(request.headers.get("Idempotency-Key"));
    this.requests.push({ path: new URL(request.url).pathname, key: request.headers.get("Idempotency-Key") });
    const response = await fetch(request);
    if (this.loseReplies > 0) {
      this.loseReplies--;
      await response.arrayBuffer();
      await this.between();
      if (this.lostAs503) {
        return unavailable("0");
      }
      throw new TypeError("fetch failed: the reply was lost");
    }
    return response;
  };
}
