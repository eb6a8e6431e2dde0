-- set_checkpoint: store a signed checkpoint. The caller then makes it the
-- one the next checkpoint chains to (set_checkpoint_hash), in the same
-- transaction, under the head row's lock taken by checkpoint_head.
-- $1 tenant, $2 scope, $3 n, $4 seq, $5 mac, $6 at, $7 prev, $8 key id,
-- $9 sig
INSERT INTO racefree_audit_checkpoints (tenant, scope, n, seq, mac, at, prev, key_id, sig)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
