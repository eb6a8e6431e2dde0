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
-- synchronous_standby_names names standbys, and one of them streams as
-- synchronous (pg_stat_replication.sync_state sync or quorum): a commit
-- made while none streams would wait until one comes back, and an
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
  WHEN EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming')
    THEN NULL
  WHEN EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state IS NULL)
    THEN 'racefree: not durable: this role cannot see pg_stat_replication.sync_state (grant it pg_read_all_stats), so whether a synchronous standby streams is not known; synchronous_standby_names is ' || current_setting('synchronous_standby_names')
  ELSE 'racefree: not durable: no synchronous standby streams (synchronous_standby_names is ' || current_setting('synchronous_standby_names') || '), so a commit would wait for one or be released as a local commit'
END AS reason) AS d
