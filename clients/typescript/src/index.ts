// racefree's TypeScript client: the types of every route, generated from
// the server's OpenAPI document (schema.ts), and a thin layer over
// openapi-fetch: typed problem errors, Idempotency-Key retries, the
// claim heartbeat, and a class per route family.
export * from "./client.js";
export * from "./keep.js";
export * from "./problems.js";
export * from "./events.js";
export * from "./sequences.js";
export * from "./tokens.js";
export * from "./quotas.js";
export * from "./audit.js";
export * from "./outbox.js";
export * from "./inbox.js";
export type { components, operations, paths } from "./schema.js";
