-- scopes_page: one page of the tenant's scopes that have a chain head,
-- in order: those that begin with the prefix ('' for any), after the
-- previous page's last scope ('' for the first page), at most the limit.
-- ?1 tenant, ?2 prefix, ?3 after, ?4 limit
SELECT scope FROM racefree_audit_heads
WHERE tenant = ?1 AND substr(scope, 1, length(?2)) = ?2 AND scope > ?3
ORDER BY scope
LIMIT ?4
