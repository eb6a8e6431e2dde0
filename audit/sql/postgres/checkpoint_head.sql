-- checkpoint_head: take the scope's next checkpoint number and read the
-- head it signs, in one statement that locks the head row until commit:
-- appends to the scope wait for the moment it takes to sign, and two
-- checkpoints of one scope are numbered and chained one after the other.
-- No row: the tenant's scope has no entry yet.
-- $1 tenant, $2 scope, $3 clock (NULL: the database clock)
UPDATE racefree_audit_heads SET cp_n = cp_n + 1
WHERE tenant = $1 AND scope = $2
RETURNING last_seq, last_mac, cp_n, cp_hash,
  COALESCE($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
