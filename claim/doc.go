// Package claim gives exactly one holder at a time a key, for a time to
// live, with a fencing token.
//
// Many workers or requests race for one key; exactly one wins. When the
// winner's TTL lapses, or it releases the key, the key is winnable again,
// once. INSERT … ON CONFLICT DO NOTHING wins once and then loses forever;
// Acquire is instead one conditional upsert (INSERT … ON CONFLICT … DO
// UPDATE … RETURNING) that takes the key only when it is free.
//
// Every tenure carries a fence: a number that grows by exactly one each time
// the key is acquired while not live, and that renewals keep. Fences never
// go backwards, not even after Reap deletes a claim: a key with no row
// starts above the highest fence reaped in its namespace (the namespace's
// floor, raised in the transaction that deletes the rows). Renew, Release
// and Guard are conditioned on (holder, fence), so a holder that stalled past
// its TTL gets ErrStaleFence (someone took over) or ErrNotHeld (its claim
// lapsed) and never a silent success. Guard, called inside the caller's
// transaction, makes writes to the same database truly exclusive.
//
// Boundaries and clocks: a claim is live while now < expires_at, and free
// from the millisecond expires_at is reached. Each row stores its own
// expires_at from its holder's TTL. "now" is the engine's clock, read inside
// each statement (or Config.Clock in tests), never a caller's timestamp.
//
// Tenants: every claim, and every namespace's fence floor, belongs to the
// tenant its call's context names (tenant.With; tenant.Default when none).
// Two tenants using the same namespace and key hold two independent claims
// with independent fences, and no call of one sees, changes or reaps the
// other's. Every statement filters by the tenant; on PostgreSQL each call
// also runs in a transaction whose tenant is set (tenant.Run), so that
// row-level security holds for an application role. Reap visits every
// tenant, one at a time.
//
// Schema: every call needs migration 011 (tenants) and fails with
// racefree.ErrSchemaOutdated before it, writing nothing; tenants other
// than the default need migration 012. Rows written before migration 002
// (NULL lease columns) are free to claim, held by nobody, and never
// reaped.
package claim
