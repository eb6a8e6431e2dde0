-- set_head: record the MAC and key epoch of the entry just numbered by next,
-- in the same transaction, which still holds the head row's lock. The
-- last_seq condition makes a mismatch affect no row, which the caller
-- treats as an error rather than chaining onto another entry.
-- $1 scope, $2 seq, $3 mac, $4 key id
UPDATE racefree_audit_heads SET last_mac = $3, key_id = $4
WHERE scope = $1 AND last_seq = $2
