-- new_head_timeline: new_head from migration 018 (TimelineVersion) on: the
-- head row of a new scope records the timeline its first entry is appended
-- on (see lock_head_timeline), so a chain's first append needs no second
-- write of the row.
-- $1 tenant, $2 scope, $3 key id
INSERT INTO racefree_audit_heads (tenant, scope, last_seq, last_mac, key_id, cp_n, cp_hash, timeline)
VALUES ($1, $2, 0, ''::bytea, $3, 0, ''::bytea,
  ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint)
ON CONFLICT (tenant, scope) DO NOTHING
