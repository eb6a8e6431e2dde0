-- scopes: every scope that has a chain head, for verifying all of them.
SELECT scope FROM racefree_audit_heads ORDER BY scope
