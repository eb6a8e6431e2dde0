-- scopes: every scope of the tenant that has a chain head, for verifying
-- all of them.
-- ?1 tenant
SELECT scope FROM racefree_audit_heads WHERE tenant = ?1 ORDER BY scope
