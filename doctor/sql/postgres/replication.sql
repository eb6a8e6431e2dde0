-- replication: the standbys streaming from this server. Every role sees a
-- row per WAL sender; only a superuser or a member of pg_read_all_stats
-- sees their columns, so sync_state is NULL for a row the caller may not
-- see: visible counts the rows whose state can be judged, and synchronous
-- those that a commit waits for (sync, or one of a quorum); wanted is how
-- many synchronous_standby_names waits for: the number before its list,
-- FIRST n (…), ANY n (…) or n (…), else 1.
SELECT count(*),
       count(sync_state),
       count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),
       COALESCE(substring(current_setting('synchronous_standby_names') FROM '(?i)^\s*(?:(?:first|any)\s+)?([0-9]+)\s*\(')::int, 1)
  FROM pg_stat_replication
