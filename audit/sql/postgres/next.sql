-- next: the previous release's way to number an entry, which Append uses
-- on a schema before migration 015 (OneWriteVersion), and
-- BenchmarkAppend's baseline: hand out the scope's next number and return
-- the chain head it extends, in one statement. The upsert creates the head
-- row idempotently
-- (the first entry is 1, under key epoch $3) or increments last_seq; either
-- way it holds the head row's lock until the transaction ends, so the
-- number and the prev_mac returned here cannot be handed to anyone else
-- before this entry commits or rolls back, and a rollback gives the number
-- back. last_mac and key_id are left alone: the insert's trigger sets them
-- once the caller has computed the entry's MAC. The row is the caller's
-- tenant's, and the conflict target leads with the tenant: a scope of the
-- same name in another tenant is another chain. The clock is the
-- statement's (clock_timestamp()), or the injected test clock $4.
-- $1 tenant, $2 scope, $3 key id of a new scope, $4 clock (NULL: the
-- database clock)
INSERT INTO racefree_audit_heads AS h (tenant, scope, last_seq, last_mac, key_id, cp_n, cp_hash)
VALUES ($1, $2, 1, ''::bytea, $3, 0, ''::bytea)
ON CONFLICT (tenant, scope) DO UPDATE SET last_seq = h.last_seq + 1
RETURNING h.last_seq, h.last_mac, h.key_id,
  COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
