// The tamper-evident audit log over HTTP, as the Go client's Append,
// Entries, Verify, Checkpoint and LatestCheckpoint (audit.Log).
import type { CallOptions, IdempotentOptions, PageOptions, RacefreeClient } from "./client.js";
import { MaxPage, pages } from "./pages.js";
import type { components, operations } from "./schema.js";

type AppendBody = operations["post_v1_audit"]["requestBody"]["content"]["application/json"];

/** AuditEntry is an entry as stored: numbered (gapless within its scope), timed by the server and chained (prev_mac, mac). */
export type AuditEntry = components["schemas"]["AuditEntry"];

/** AuditRecord is what the caller appends: who (actor) did what (action) to what (subject), with any JSON data. */
export type AuditRecord = Omit<AppendBody, "scope">;

/** AuditPage is one page of a scope's entries, oldest first; pass next as after for the next page. */
export type AuditPage = operations["get_v1_audit"]["responses"][200]["content"]["application/json"];

/** AuditVerification is the verdict on a chain: intact, or the break found; anchored by a checkpoint or not. */
export type AuditVerification = components["schemas"]["AuditVerification"];

/** Checkpoint is a signed checkpoint of a scope's head. */
export type Checkpoint = components["schemas"]["Checkpoint"];

/** Audit is the tamper-evident audit log (audit.Log over HTTP); a server without --audit-keys answers AuditUnconfiguredProblem. */
export class Audit {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * append appends record to the chain of scope of the key's tenant (POST
   * /v1/audit) and returns the entry as stored. A retry after a lost
   * reply carries the same Idempotency-Key and returns the entry already
   * appended, never a second one. racefree's own actions
   * (racefree.audit.*) are an InvalidInputProblem.
   */
  append(scope: string, record: AuditRecord, options?: IdempotentOptions): Promise<AuditEntry> {
    const { api } = this.client;
    return this.client.idempotent((a) => api.POST("/v1/audit", { body: { ...record, scope }, ...a }), options);
  }

  /**
   * list returns one page of the entries of scope (GET /v1/audit), oldest
   * first, numbered above options.after, at most options.limit and 4 MiB
   * of JSON; page on with after set to the page's next until a page has
   * no entries (next then unchanged): a short page is not the end.
   */
  list(scope: string, options?: PageOptions): Promise<AuditPage> {
    const { api } = this.client;
    const query = { scope, after: options?.after as number | undefined, limit: options?.limit };
    return this.client.retry((a) => api.GET("/v1/audit", { params: { query }, ...a }), options);
  }

  /**
   * all yields the entries of scope numbered above options.after, oldest
   * first, reading 1,000 a page (options.limit is ignored) and paging on
   * to the first empty page: `for await (const e of rf.audit.all("acme"))`.
   * A page's error is thrown and ends the loop; leaving the loop sends no
   * further request. Listing is not verifying: verify checks the chain.
   */
  async *all(scope: string, options?: PageOptions): AsyncGenerator<AuditEntry, void, undefined> {
    yield* pages(options?.after, async (after) => {
      const page = await this.list(scope, { ...options, after, limit: MaxPage });
      return { items: page.entries, next: page.next };
    });
  }

  /**
   * verify verifies the chain of scope on the server (GET
   * /v1/audit/verify) against the checkpoints stored in its database. A
   * broken chain is a verification whose intact is false and break says
   * where, not an error.
   */
  verify(scope: string, options?: CallOptions): Promise<AuditVerification> {
    const { api } = this.client;
    return this.client.retry((a) => api.GET("/v1/audit/verify", { params: { query: { scope } }, ...a }), options);
  }

  /**
   * checkpoint signs a checkpoint of the head of scope and stores it in
   * the server's database (POST /v1/audit/checkpoints, admin scope). Keep
   * a copy elsewhere: checkpoints kept outside the database are what
   * reveal a database rolled back as a whole. A retry after a lost reply
   * carries the same Idempotency-Key.
   */
  checkpoint(scope: string, options?: IdempotentOptions): Promise<Checkpoint> {
    const { api } = this.client;
    return this.client.idempotent((a) => api.POST("/v1/audit/checkpoints", { body: { scope }, ...a }), options);
  }

  /**
   * latestCheckpoint returns the newest stored checkpoint of scope (GET
   * /v1/audit/checkpoints/latest), or throws a NotFoundProblem when there
   * is none.
   */
  latestCheckpoint(scope: string, options?: CallOptions): Promise<Checkpoint> {
    const { api } = this.client;
    return this.client.retry((a) => api.GET("/v1/audit/checkpoints/latest", { params: { query: { scope } }, ...a }), options);
  }
}
