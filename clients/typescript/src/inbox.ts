// The webhook inbox over HTTP, as the Go client's Deliver and
// InboxEvents (inbox.Inbox).
import type { CallOptions, PageOptions, RacefreeClient } from "./client.js";
import { MaxPage, pages } from "./pages.js";
import type { operations } from "./schema.js";

/** InboxPage is one page of a source's deliveries, oldest first; pass next as after for the next page. */
export type InboxPage = operations["get_v1_inbox_source"]["responses"][200]["content"]["application/json"];

/** InboxEvent is one delivery as received: seq, its webhook-id, status, and its payload (JSON, or a string when it was not JSON). */
export type InboxEvent = InboxPage["events"][number];

/** WebhookHeaders are the Standard Webhooks headers of a delivery, exactly as its sender signed it. */
export interface WebhookHeaders {
  "webhook-id": string;
  "webhook-timestamp": string;
  "webhook-signature": string;
  /** Content-Type of the body. Defaults to application/json. */
  "Content-Type"?: string;
}

/** Inbox is the webhook inbox (inbox.Inbox over HTTP). */
export class Inbox {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * list returns one page of the deliveries of source the key's tenant
   * received (GET /v1/inbox/{source}), oldest first, numbered above
   * options.after, at most options.limit and 4 MiB of JSON (a larger
   * delivery alone); page on with after set to the page's next until a
   * page has no events: a short page is not the end. A source the server
   * has no secret for is an UnknownSourceProblem.
   */
  list(source: string, options?: PageOptions): Promise<InboxPage> {
    const { api } = this.client;
    const query = { after: options?.after as number | undefined, limit: options?.limit };
    return this.client.retry((a) => api.GET("/v1/inbox/{source}", { params: { path: { source }, query }, ...a }), options);
  }

  /**
   * all yields the deliveries of source the key's tenant received above
   * options.after, oldest first, reading 1,000 a page (options.limit is
   * ignored) and paging on to the first empty page: `for await (const e of
   * rf.inbox.all("stripe"))`. A page's error is thrown and ends the loop;
   * leaving the loop sends no further request.
   */
  async *all(source: string, options?: PageOptions): AsyncGenerator<InboxEvent, void, undefined> {
    yield* pages(options?.after, async (after) => {
      const page = await this.list(source, { ...options, after, limit: MaxPage });
      return { items: page.events, next: page.next };
    });
  }

  /**
   * deliver forwards one Standard Webhooks delivery to the inbox of
   * source (POST /v1/inbox/{source}), its body and headers exactly as the
   * sender signed them: a relay in front of the server, or a test. The
   * route is authenticated by the signature, not by the client's key. A
   * new delivery and a duplicate of one already recorded both succeed
   * (the inbox records each webhook-id once), which is why deliver is
   * retried like a call with an Idempotency-Key. A bad signature is a
   * BadSignatureProblem, a source the server has no secret for an
   * UnknownSourceProblem.
   */
  async deliver(source: string, headers: WebhookHeaders, body: string, options?: CallOptions): Promise<void> {
    const { api } = this.client;
    const { "Content-Type": contentType, ...header } = headers;
    await this.client.retry(
      (a) =>
        api.POST("/v1/inbox/{source}", {
          params: { path: { source }, header },
          body,
          bodySerializer: () => body,
          ...a,
          headers: { ...a.headers, "Content-Type": contentType ?? "application/json" },
        }),
      options,
    );
  }
}
