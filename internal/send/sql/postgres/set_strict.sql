-- set_strict: set.sql for a DB that requires synchronous replication
-- (racefree.Config.RequireSynchronousReplication): the transaction's
-- tenant, set only when this transaction's COMMIT will wait for a
-- synchronous standby. Otherwise the statement fails, which aborts the
-- transaction (or the pipeline's implicit one) before anything in it
-- commits. It is the first statement of every write, so the check costs
-- no round trip of its own.
--
-- The commit waits for a standby when synchronous_commit is on,
-- remote_write or remote_apply (local and off never wait),
-- synchronous_standby_names names standbys, and as many of them as it
-- waits for stream as synchronous (pg_stat_replication.sync_state sync
-- or quorum): the number before its list, FIRST n (…), ANY n (…) or
-- n (…), else 1. A commit made while fewer stream would wait until
-- enough come back (with ANY 2 and one standby, for ever), and an
-- operator or a failover manager that empties synchronous_standby_names
-- meanwhile (pg_auto_failover does, when its standby is away) releases
-- it as a local commit. A role without pg_read_all_stats (or a
-- superuser) sees every column of pg_stat_replication but the pid as
-- NULL, so it cannot tell a synchronous standby from an asynchronous
-- one: the check fails for it (fail closed), saying so.
--
-- SQL has no RAISE: the failure is a cast of the reason to integer,
-- SQLSTATE 22P02 with the reason in the message, which
-- postgres.Engine.InterpretError turns into a *racefree.NotDurableError
-- by its prefix "racefree: not durable: ". Every reason reads a setting
-- (a stable function), so the planner never folds the cast into a
-- constant that fails whatever the check says.
-- $1 tenant
SELECT set_config('racefree.tenant_id',
                  CASE WHEN d.reason IS NULL THEN $1 ELSE d.reason::int::text END, true)
FROM (SELECT CASE
  WHEN current_setting('synchronous_commit') NOT IN ('on', 'remote_write', 'remote_apply')
    THEN 'racefree: not durable: synchronous_commit is ' || current_setting('synchronous_commit') || ', so a commit waits for no standby'
  WHEN current_setting('synchronous_standby_names') = ''
    THEN 'racefree: not durable: synchronous_standby_names is empty, so a commit waits for no standby'
  WHEN (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming')
       >= COALESCE(substring(current_setting('synchronous_standby_names') FROM '(?i)^\s*(?:(?:first|any)\s+)?([0-9]+)\s*\(')::int, 1)
    THEN NULL
  WHEN EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state IS NULL)
    THEN 'racefree: not durable: this role cannot see pg_stat_replication.sync_state (grant it pg_read_all_stats), so whether a synchronous standby streams is not known; synchronous_standby_names is ' || current_setting('synchronous_standby_names')
  WHEN EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming')
    THEN 'racefree: not durable: fewer synchronous standbys stream than synchronous_standby_names waits for (' || current_setting('synchronous_standby_names') || '), so a commit would wait for them or be released as a local commit'
  ELSE 'racefree: not durable: no synchronous standby streams (synchronous_standby_names is ' || current_setting('synchronous_standby_names') || '), so a commit would wait for one or be released as a local commit'
END AS reason) AS d
