-- tenant_known: whether racefree has seen tenant ?1 (every tenant with a
-- key has been registered, by the transaction that created the key).
SELECT EXISTS (SELECT 1 FROM racefree_tenants WHERE id = ?1)
