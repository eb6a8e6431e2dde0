-- current: the last number the tenant's (scope, name) counter handed out,
-- as the caller's snapshot sees it; no row means none was handed out yet.
-- It takes no lock: use Next, never Current + 1, to get a number.
-- ?1 tenant, ?2 scope, ?3 name
SELECT last FROM racefree_sequences WHERE tenant = ?1 AND scope = ?2 AND name = ?3
