-- set_checkpoint: store a signed checkpoint. The caller then makes it the
-- one the next checkpoint chains to (set_checkpoint_hash), in the same
-- transaction, under the head row's lock taken by checkpoint_head.
-- ?1 scope, ?2 n, ?3 seq, ?4 mac, ?5 at, ?6 prev, ?7 key id, ?8 sig
INSERT INTO racefree_audit_checkpoints (scope, n, seq, mac, at, prev, key_id, sig)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
