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
// Compatible mode: against a schema older than migration 002 (opened with
// racefree.SchemaAllowOutdated during a deploy), Acquire falls back to the
// legacy rule (the first writer of a key wins it for good), Get reports
// what the old columns hold, and Renew, Release and Guard fail with
// racefree.ErrSchemaOutdated. Rows written by such code, or before the
// migration, have NULL lease columns and are claimable once the new schema
// is in place. Against a schema older than migration 006 (no fence floors),
// Acquire does not read a floor and Reap deletes nothing and fails with
// racefree.ErrSchemaOutdated, so no fence can restart in between.
package claim
