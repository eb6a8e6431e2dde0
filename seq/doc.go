// Package seq hands out gapless numbers per (tenant, scope, name) counter:
// invoice numbers, ticket numbers, the positions of an audit log.
//
// MAX(number)+1 hands one number out twice when two callers read the same
// maximum; LOCK TABLE makes every scope wait behind one; a database
// SEQUENCE is not per scope and leaves a gap for every rolled-back
// transaction. A counter here is one row, racefree_sequences (tenant,
// scope, name, last), and NextN is one statement:
//
//	INSERT … VALUES (tenant, scope, name, n) ON CONFLICT (tenant, scope, name)
//	DO UPDATE SET last = last + n RETURNING last
//
// The first call creates the row; every later call increments it under the
// row's own lock (the database's write lock on SQLite), held until the
// caller's transaction ends. So:
//
//   - however many callers (goroutines, processes, instances) run Next on
//     one counter at once, the committed numbers are exactly 1..N, with no
//     gap and no duplicate;
//   - a transaction that rolls back consumes nothing: the next caller gets
//     the same numbers;
//   - counters of other scopes or names are other rows and never wait for
//     each other on PostgreSQL (SQLite has one writer for the whole file).
//
// Pass the caller's transaction, so that the number commits or rolls back
// with the row that carries it, and keep that transaction short: the next
// caller of the same counter waits for it.
//
// # A lost reply
//
// "No gap" is what the database committed. What a caller learns can have
// one: when the connection to PostgreSQL breaks after COMMIT was sent and
// before its reply arrived, the commit may have happened and nobody can
// tell. NextN on the pool, which commits by itself, then returns an error
// matching racefree.ErrUnavailable with its numbers committed and handed
// to nobody; NextN called again hands out the next ones. racefree never
// runs the increment again by itself (an unknown outcome is not a
// failure). In the caller's transaction the numbers commit or not with the
// row that carries them, and re-reading that row settles it. NextKeyed
// settles it wherever nothing else records the numbers: it records a
// request key with them in the same transaction (an idempotency record),
// and the retry with the same key gets the same numbers back and consumes
// none.
//
// # Isolation
//
// At PostgreSQL's READ COMMITTED (racefree's default) a caller that waited
// for the row lock increments the value the other transaction committed.
// At REPEATABLE READ or SERIALIZABLE PostgreSQL refuses instead, with a
// serialization failure (SQLSTATE 40001, racefree.ErrRetryable): the caller
// must roll back and run its whole transaction again. racefree.DB.InTx does
// that; inside it, SET TRANSACTION ISOLATION LEVEL as the first statement
// selects the level. On SQLite every racefree transaction begins
// IMMEDIATE, holding the write lock before its first read.
//
// Current reads the last number handed out, without a lock: never use
// Current + 1 as a number.
//
// # Tenants
//
// Every call runs for the tenant its context names (tenant.From: Default
// when none; tenant.With or tenant.InTx name another). The tenant leads
// the counter's key and every statement filters by it, so two tenants'
// counters of the same scope and name are two counters that never see nor
// wait for each other; the scope is a namespace inside the tenant. On
// PostgreSQL (migration 012) row-level security keeps them apart a second
// time: NextN and Current run in the caller's transaction after setting
// its tenant (a transaction set to another tenant is a
// *tenant.MismatchError), or, given the pool, in a short transaction of
// their own that sets it (package tenant).
//
// Every call needs migration 011 (Migration): before it, each fails with
// racefree.ErrSchemaOutdated and writes nothing. Tenants other than
// Default need 012. During a rollout, between 011 and 012, the previous
// release's statements still run (their rows are the default tenant's);
// 012 ends that.
package seq
