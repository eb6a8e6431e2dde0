-- next: hand out the next n numbers of the tenant's (scope, name) counter
-- in one atomic statement, and return the last of them (the first is
-- last - n + 1). The first call creates the row at n; every later call
-- conflicts on the primary key (tenant, scope, name) and adds n under the
-- row lock that ON CONFLICT DO UPDATE takes, which a concurrent increment
-- of the same counter waits for and then re-reads (READ COMMITTED: DO
-- UPDATE always sees the latest committed row, never the statement's
-- snapshot), so no two callers get the same number. The lock is held until
-- the caller's transaction ends: a rollback undoes the increment and the
-- next caller gets the same numbers, so nothing is lost. Other counters
-- (other tenants, scopes, names) are other rows and never wait. The row is
-- written with the caller's tenant and the conflict target leads with it,
-- so a counter of another tenant with the same scope and name is never
-- touched. At REPEATABLE READ or SERIALIZABLE a concurrent committed
-- increment makes this fail with 40001, for the transaction to be retried
-- as a whole. The DO UPDATE WHERE refuses to pass the BIGINT maximum: no
-- row comes back, nothing changes.
-- $1 tenant, $2 scope, $3 name, $4 n
INSERT INTO racefree_sequences AS s (tenant, scope, name, last)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant, scope, name) DO UPDATE SET last = s.last + excluded.last
WHERE s.last <= 9223372036854775807 - excluded.last
RETURNING s.last
