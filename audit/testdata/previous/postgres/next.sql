-- next: hand out the scope's next number and return the chain head it
-- extends, in one statement. The upsert creates the head row idempotently
-- (the first entry is 1, under key epoch $2) or increments last_seq; either
-- way it holds the head row's lock until the transaction ends, so the
-- number and the prev_mac returned here cannot be handed to anyone else
-- before this entry commits or rolls back, and a rollback gives the number
-- back. last_mac and key_id are left alone: the insert's trigger sets them
-- once the caller has computed the entry's MAC. The clock is the
-- statement's (clock_timestamp()), or the injected test clock $3.
-- $1 scope, $2 key id of a new scope, $3 clock (NULL: the database clock)
INSERT INTO racefree_audit_heads AS h (scope, last_seq, last_mac, key_id, cp_n, cp_hash)
VALUES ($1, 1, ''::bytea, $2, 0, ''::bytea)
ON CONFLICT (scope) DO UPDATE SET last_seq = h.last_seq + 1
RETURNING h.last_seq, h.last_mac, h.key_id,
  COALESCE($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
