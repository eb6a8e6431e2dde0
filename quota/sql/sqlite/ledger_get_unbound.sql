-- ledger_get_unbound: ledger_get before migration 017 (the previous
-- release's statement, for compatible mode): no fingerprint, so a key
-- reused with another request is replayed.
-- The figures stored by the first charge of consumption key ?3
-- of (?1 tenant, ?2 scope), for a replay.
SELECT remaining, reset_at FROM racefree_quota_ledger WHERE tenant = ?1 AND scope = ?2 AND ckey = ?3
