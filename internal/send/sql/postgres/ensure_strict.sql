-- ensure_strict: ensure.sql for a DB that requires synchronous replication
-- (racefree.Config.RequireSynchronousReplication): the transaction's
-- tenant, the one it has or $1 set now, answered only when this
-- transaction's COMMIT will wait for a synchronous standby; otherwise the
-- statement fails and the transaction can commit nothing. The check is
-- set_strict.sql's (see there), and runs whether or not the transaction
-- had a tenant: a caller's transaction is checked when racefree first
-- writes in it.
-- $1 tenant
SELECT CASE WHEN d.reason IS NULL
            THEN COALESCE(NULLIF(current_setting('racefree.tenant_id', true), ''),
                          set_config('racefree.tenant_id', $1, true))
            ELSE d.reason::int::text END
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
