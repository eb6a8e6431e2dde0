-- scopes: every scope of the tenant that has a chain head, an entry or a
-- stored checkpoint, in order, for verifying all of them. The head rows
-- alone would not do: a scope whose head row was deleted keeps its
-- entries and checkpoints, and must be verified (and found broken), not
-- left out. Entries and checkpoints are read one scope at a time (a loose
-- index scan: each step is the least scope after the previous one, one
-- seek in the (tenant, scope, …) primary key), so the query reads as many
-- rows as the tenant has scopes, not entries.
-- $1 tenant
WITH RECURSIVE
  e(scope) AS (
    SELECT min(scope) FROM racefree_audit WHERE tenant = $1
    UNION ALL
    SELECT (SELECT min(a.scope) FROM racefree_audit AS a WHERE a.tenant = $1 AND a.scope > e.scope)
    FROM e WHERE e.scope IS NOT NULL
  ),
  c(scope) AS (
    SELECT min(scope) FROM racefree_audit_checkpoints WHERE tenant = $1
    UNION ALL
    SELECT (SELECT min(k.scope) FROM racefree_audit_checkpoints AS k WHERE k.tenant = $1 AND k.scope > c.scope)
    FROM c WHERE c.scope IS NOT NULL
  )
SELECT scope FROM racefree_audit_heads WHERE tenant = $1
UNION SELECT scope FROM e WHERE scope IS NOT NULL
UNION SELECT scope FROM c WHERE scope IS NOT NULL
ORDER BY scope
