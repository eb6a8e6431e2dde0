// racefree's TypeScript client: the types of every route, generated from
// the server's OpenAPI document (schema.ts), and a thin layer over
// openapi-fetch: typed problem errors, Idempotency-Key retries and the
// claim heartbeat.
export * from "./client.js";
export * from "./keep.js";
export * from "./problems.js";
export type { components, operations, paths } from "./schema.js";
