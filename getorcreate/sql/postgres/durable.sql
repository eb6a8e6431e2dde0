-- durable: on a primary with a synchronous standby, lock the row that Do
-- answers "exists" about FOR KEY SHARE, so that the transaction that
-- answers commits only once the standby has the row. The row was
-- committed by another transaction, and with a synchronous standby that
-- commit may be on the primary alone (its wait for the standby ended by a
-- cancel, such as pgx's on a timed-out request, or by a terminated
-- backend): a caller handed that row then acts on a row a failover loses.
-- The lock writes WAL and takes an xid, the two things that make this
-- transaction's COMMIT (the statement's own, on a pool or a connection;
-- the caller's, in a *sql.Tx) wait for the standby; its record is after
-- the row's commit, so once the standby has our commit it has the row.
-- The caller's Query.Select stands where the marker comment is, on lines
-- of its own (a trailing -- comment of it ends there), with its
-- arguments: a locking clause on a sub-select locks the rows of every
-- table the sub-select reads, so the lock needs no knowledge of the
-- caller's tables. It runs after the select, as a statement of its own,
-- as the inbox's durable does. Without synchronous_standby_names (a
-- stable setting, so the planner tests it once) it reads nothing and
-- costs no xid, WAL or wait. KEY SHARE is the weakest lock: only an
-- UPDATE of a key column or a DELETE of the row waits for it.
SELECT 1 FROM (
/* Query.Select */
) AS racefree_getorcreate
WHERE current_setting('synchronous_standby_names') <> ''
FOR KEY SHARE
