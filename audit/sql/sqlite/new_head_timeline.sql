-- new_head_timeline: new_head from migration 018 on; SQLite has no
-- timelines, so it is new_head.
-- ?1 tenant, ?2 scope, ?3 key id
INSERT INTO racefree_audit_heads (tenant, scope, last_seq, last_mac, key_id, cp_n, cp_hash)
VALUES (?1, ?2, 0, X'', ?3, 0, X'')
ON CONFLICT (tenant, scope) DO NOTHING
