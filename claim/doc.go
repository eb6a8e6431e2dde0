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
// Fences across a failover (PostgreSQL): a promoted asynchronous standby
// may lack the last commits of the primary it replaces, and with them
// fences the old primary acknowledged. So every new tenure's fence is at
// least the floor of the timeline the primary writes WAL on,
// (timeline - 1) * 2^40 + 1, read in the acquiring statement itself
// (pg_walfile_name(pg_current_wal_lsn())); PostgreSQL's timeline ID goes
// up at every promotion. On timeline 1 the floor is 1: fences there are
// unchanged. On timeline t a key's fences start at (t-1)·2^40+1 and then
// grow by one, so a fence stays an int64 that only ever grows, but it is
// no count of tenures: an external store that fences writes must only
// compare fences, never subtract them or expect the next one to be one
// more. The promise holds under two assumptions. The new primary's
// timeline is above the old one's: true of a streaming standby promoted
// (pg_auto_failover, Patroni), not of two standbys promoted to the same
// timeline without a shared WAL archive. And each timeline issues fewer
// than 2^40 fences in a namespace: past that, fences keep growing into the
// next timeline's range (they still never go backwards), and only a
// failover that then loses commits could repeat one. A cluster restored
// from pg_dump restarts at timeline 1 and keeps its rows and floors, so its
// fences keep growing from them. Timelines past 2^23 would overflow the
// floor, which then no longer counts. During a rolling upgrade, instances
// of a release before this one issue fences without the floor. The same floor applies to outbox
// leases, and to idempotency keys, whose lease is a claim.
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
// also runs in a transaction whose tenant is set (package tenant), so that
// row-level security holds for an application role. Reap visits every
// tenant, one at a time.
//
// Schema: every call needs migration 011 (tenants) and fails with
// racefree.ErrSchemaOutdated before it, writing nothing; tenants other
// than the default need migration 012. Rows written before migration 002
// (NULL lease columns) are free to claim, held by nobody, and never
// reaped.
package claim
