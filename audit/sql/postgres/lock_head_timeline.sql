-- lock_head_timeline: lock_head from migration 018 (TimelineVersion) on,
-- which also returns the timeline the head row recorded (NULL: written
-- before 018, or by the previous release's new head) and the timeline this
-- server writes WAL on now, read in the same statement: the first 8 hex
-- digits of the name of the WAL file being written (pg_walfile_name names
-- it by the insertion timeline), which goes up at every promotion. A
-- server's timeline cannot change while it holds the row's lock: only a
-- standby is promoted, and a standby cannot lock a row. On a standby the
-- statement fails as a write does (FOR UPDATE in a read-only transaction,
-- SQLSTATE 25006), before it reads the WAL position.
-- $1 tenant, $2 scope, $3 clock (NULL: the database clock)
SELECT last_seq, last_mac, key_id,
  COALESCE($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint),
  timeline,
  ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
FROM racefree_audit_heads WHERE tenant = $1 AND scope = $2
FOR UPDATE
