-- checkpoint_head: take the scope's next checkpoint number and read the
-- head it signs, in one statement that locks the head row until commit:
-- appends to the scope wait for the moment it takes to sign, and two
-- checkpoints of one scope are numbered and chained one after the other.
-- No row: the scope has no entry yet.
-- $1 scope, $2 clock (NULL: the database clock)
UPDATE racefree_audit_heads SET cp_n = cp_n + 1
WHERE scope = $1
RETURNING last_seq, last_mac, cp_n, cp_hash,
  COALESCE($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
