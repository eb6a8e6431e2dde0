// Package onetime issues one-time codes and rotating refresh tokens, and
// redeems each of them exactly once.
//
// A code (a password-reset link, an e-mail verification, a login code) is
// read and then marked used in a second statement by the code this package
// replaces, so that two requests that read it at once both redeem it.
// Consume is instead one conditional UPDATE (unused, unrevoked, unexpired)
// whose returned row decides: of any number of concurrent redemptions of
// one code, on either engine, exactly one gets Consumed. A refusal is then
// explained by a read (AlreadyUsed, Revoked, Expired, Unknown), which never
// decides anything.
//
// Tokens are 256 random bits from crypto/rand, URL-safe base64 without
// padding (43 characters). Only their SHA-256 is stored: a copy of the
// database redeems nothing.
//
// Refresh tokens come in families (RFC 9700 §4.14.2). A family has exactly
// one live token, its head. Rotate replaces the head with its successor and
// retires the presented token in one transaction (one statement on
// PostgreSQL, two in one transaction on SQLite), by one conditional UPDATE
// of the family's row, so concurrent rotations of one token never yield two
// successors. Presenting a retired token again is reuse: Rotate revokes the
// whole family in the same transaction and answers Reused, and every token
// of the family is refused from then on.
//
// A client whose rotation reply was lost retries with the token it still
// has. With the default grace window of 0 that retry is reuse and logs the
// user out. Within Options.Grace of the rotation, the retry instead gets
// the same successor back (Replayed), never a second one, as long as the
// successor has not been rotated itself. The successor is not stored to
// make that possible: it is derived, as HMAC-SHA256(Options.Secret, the
// tenant and the parent's hash), so whoever holds the database alone still
// cannot compute it, and every instance sharing the Secret derives the
// same one. A grace window therefore needs a Secret shared by every
// instance; without one each Store uses a random secret of its own.
//
// Outcomes are values, not errors: Consume and Rotate return an error only
// for bad input or a failure of the database. A caller that runs Rotate in
// its own transaction and returns Rotate's error from it therefore commits
// a family's revocation on reuse.
//
// Boundaries and clocks: a token is live while now < its expiry and
// expired from that exact millisecond. "now" is the engine's clock read by
// each statement (or Config.Clock in tests), never the caller's.
//
// Round trips, in a transaction whose tenant is set (tenant.InTx):
// Consume that redeems is one statement; a refused one reads once more to
// explain. Rotate that rotates is one statement on PostgreSQL and two in
// one transaction on SQLite; a grace-window retry or a reuse is two
// statements; other refusals read once more to explain. Through the pool
// on PostgreSQL a call adds BEGIN, the tenant's set_config and COMMIT.
//
// Reap deletes codes and families that can no longer be used, once they
// have been expired for a retention period, in batches, for every tenant,
// one tenant at a time.
//
// Tenants: every call runs for the tenant its context names
// (tenant.With, or tenant.InTx's context; tenant.Default when none), and
// every statement filters by it. A token of one tenant is unknown to
// every other, even the same token: the tables' keys lead with the tenant
// (migration 010 already had the column), and a successor is derived
// from the tenant too. On PostgreSQL each call runs in a transaction that
// sets the tenant for row-level security (the caller's *sql.Tx, or a
// short one of its own; see package tenant). The Store itself belongs to no
// tenant: Options has no tenant field any more (the previous release's
// Options.Tenant is gone; its rows of tenant "default" are the default
// tenant's, and a Store that named another tenant becomes a context that
// names it).
//
// Schema: every operation needs migration 011 and fails with
// racefree.ErrSchemaOutdated before it, writing nothing; a tenant other
// than the default needs 012. The previous release's statements keep
// working against 011 during a rollout.
package onetime
