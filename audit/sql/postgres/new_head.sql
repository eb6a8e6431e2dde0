-- new_head: create the head row of a scope without entries, at number 0
-- under key epoch $3, idempotently (a concurrent first append may have
-- created it); lock_head then reads it. The row is the caller's tenant's.
-- $1 tenant, $2 scope, $3 key id
INSERT INTO racefree_audit_heads (tenant, scope, last_seq, last_mac, key_id, cp_n, cp_hash)
VALUES ($1, $2, 0, ''::bytea, $3, 0, ''::bytea)
ON CONFLICT (tenant, scope) DO NOTHING
