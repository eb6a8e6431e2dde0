-- synchronous: whether a standby waits for commits, so that durable.sql
-- must run. Asked first, so that a select PostgreSQL cannot lock (an
-- aggregate, DISTINCT, GROUP BY, a set operation, an outer join) fails
-- only where the lock is needed, and a primary without a synchronous
-- standby answers with one round trip and no xid, WAL or wait.
SELECT current_setting('synchronous_standby_names') <> ''
