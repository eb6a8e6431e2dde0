// Package getorcreate returns a row, creating it when it does not exist,
// without ever creating it twice.
//
// "SELECT, and INSERT when nothing came back" lets two concurrent callers
// both see nothing and both insert. Do instead relies on the database:
//
//  1. A UNIQUE constraint or unique index on the key (the caller's schema)
//     makes a second row impossible, whatever the code does.
//  2. INSERT … ON CONFLICT (<key>) DO NOTHING RETURNING <columns> returns the
//     row when this call created it, and no row when it already existed.
//  3. Only then, SELECT <the same columns> … WHERE <key> reads the existing
//     row.
//
// The guarantee: however many callers run Do for one key at once, exactly
// one gets created == true, all get the same row, and the table holds one
// row for the key. The insert and select are the caller's own SQL on the
// caller's own tables, run on the caller's executor (*sql.DB, *sql.Tx,
// *sql.Conn or *racefree.DB), so a created row commits or rolls back with
// the caller's transaction.
//
// # The conflict target must match the unique index
//
// Name the key's columns — or, for an expression index, the same expression
// — in ON CONFLICT. Against
//
//	CREATE UNIQUE INDEX users_email ON users (lower(email));
//
// ON CONFLICT (email) is rejected on both PostgreSQL and SQLite (Do returns
// ErrConflictTarget); write ON CONFLICT (lower(email)) and select with
// WHERE lower(email) = lower($1). A bare ON CONFLICT DO NOTHING, without a
// target, also swallows conflicts on every other unique constraint of the
// table; the select then finds no row for the key, and Do fails with
// ErrVanished rather than invent a result.
//
// # A second unique index
//
// ON CONFLICT (<key>) absorbs conflicts on its target only; on both engines
// a row that collides on another unique index of the table (a users table
// unique on email and on handle) raises a unique violation. Do answers it
// the same way on both engines: it selects by the key, and
//
//   - returns the row, created false, when one exists: a concurrent caller
//     created the same entity, and its row collided with this insert on the
//     other index first (PostgreSQL checks the target before it inserts,
//     but the other index only while it inserts, so two callers of one key
//     can meet there);
//   - returns a *ConflictError naming the other index (errors.Is
//     racefree.ErrConflict) when no row has the key: another entity holds
//     that value, and there is nothing to get.
//
// Inside a *sql.Tx, Do runs the insert under a savepoint that it rolls back
// on failure, so the caller's transaction stays usable after a
// *ConflictError on PostgreSQL too (which otherwise aborts a transaction at
// its first error). A transaction begun with BEGIN on a *sql.Conn gets no
// savepoint: pass the *sql.Tx instead.
//
// # A row another transaction committed
//
// On PostgreSQL with a synchronous standby (synchronous_standby_names
// set), the row Do returns with created false may have been committed on
// the primary alone: its commit's wait for the standby can end early (a
// cancel, such as pgx's on a timed-out context, or a terminated backend),
// and a failover then loses it. Do therefore runs q.Select again as a
// sub-select locked FOR KEY SHARE (sql/postgres/durable.sql), which gives
// the statement's transaction (the caller's, in a *sql.Tx) an xid and WAL,
// so that its COMMIT waits for the standby past the row's: alone, Do
// returns only once the standby has the row; in the caller's transaction,
// the caller's COMMIT waits. With a synchronous standby q.Select must
// therefore be a query PostgreSQL can lock: no aggregate, DISTINCT, GROUP
// BY, set operation or outer join (Do returns the engine's error
// otherwise). Do first asks whether synchronous_standby_names is set
// (sql/postgres/synchronous.sql): without it, that one round trip is all
// it adds, with no xid, WAL or wait, and any select works; on SQLite Do
// runs nothing more.
//
// # Failure modes
//
// At PostgreSQL's READ COMMITTED, the select can miss the row the insert
// conflicted with, when that row is deleted in between. Do then tries the
// insert again, up to MaxAttempts (5) rounds in all, and returns ErrVanished
// if the row never settles. Inside a REPEATABLE READ or SERIALIZABLE
// transaction PostgreSQL reports a conflict with a row the snapshot cannot
// see as a serialization failure (40001), which Do returns as it is, for the
// caller's transaction helper (racefree.DB.InTx) to retry. There, a
// collision on another unique index with a row the snapshot cannot see is
// a *ConflictError even when that row has the key, since the select cannot
// see it either; the retry in a new transaction gets the row. An insert
// without ON CONFLICT … DO NOTHING or without RETURNING, or a select that is
// not a SELECT, is refused with racefree.ErrInvalidInput before anything
// runs, as is a select that would change data or run a second statement
// as either engine reads it (Query.Select).
//
// A ctx that ended before Do sent its insert returns the context's error,
// nothing done. On PostgreSQL outside a *sql.Tx the insert commits by
// itself, and an insert whose reply never came returns an error matching
// racefree.ErrUnavailable (invariant 14: an unknown outcome is not a
// failure): a connection lost or terminated once the insert was sent
// (its reply lost, the backend terminated, the server shutting down), or
// a ctx that ended once it was sent (the error matches the context's
// error too: pgx drops the connection and asks the server to cancel the
// insert, but the server may run it first, once a row lock it waits for
// is free). The row may exist. Do again settles it: it returns the row,
// created false, or creates it. Given the *racefree.DB, its engine
// judges which errors leave the outcome open, as for racefree's own
// statements; a *sql.DB or *sql.Conn names no engine, and Do calls open
// on PostgreSQL what the PostgreSQL engine calls unavailable (a network
// error, the connection ended inside the reply, SQLSTATE classes 08 and
// 57 but a cancel) and a ctx that ended. SQLite commits in the process:
// an interrupted insert rolls back, and no reply is lost.
package getorcreate
