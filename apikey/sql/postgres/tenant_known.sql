-- tenant_known: whether racefree has seen tenant $1 (every tenant with a
-- key has been registered, by the transaction that created the key).
-- Anyone may read the registry, which holds ids only.
SELECT EXISTS (SELECT 1 FROM racefree_tenants WHERE id = $1)
