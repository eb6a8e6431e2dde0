-- lock_head: read the scope's chain head that the next entry extends, and
-- the clock, locking the head row until the transaction ends: the number
-- after last_seq and the prev_mac returned here cannot be handed to anyone
-- else before this entry commits or rolls back, and inserting the entry
-- moves the head (the racefree_audit_chain trigger), so a rollback gives
-- the number back. No row: the tenant's scope has no entry yet (new_head).
-- The clock is the statement's (clock_timestamp()), or the injected test
-- clock $3.
-- $1 tenant, $2 scope, $3 clock (NULL: the database clock)
SELECT last_seq, last_mac, key_id,
  COALESCE($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
FROM racefree_audit_heads WHERE tenant = $1 AND scope = $2
FOR UPDATE
