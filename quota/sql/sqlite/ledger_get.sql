-- ledger_get: the figures stored by the first charge of consumption key ?3
-- of (?1 tenant, ?2 scope), for a replay, and the fingerprint of the
-- request it was bound to (NULL: written before migration 017, request
-- unknown). Needs migration 017; before it, ledger_get_unbound.
SELECT remaining, reset_at, fingerprint FROM racefree_quota_ledger WHERE tenant = ?1 AND scope = ?2 AND ckey = ?3
