-- consume_gcra_many: consume_gcra for many charges in one statement, as
-- the combiner sends them (racefree.DB.Combine): each parameter is the
-- array of one consume_gcra parameter, one element per charge, in the
-- batch's order (the order of the keys; one charge per key, so that the
-- ON CONFLICT below never touches one row twice, which PostgreSQL
-- refuses). It decides each charge as consume_gcra decides it, and
-- returns one row per charge, led by the charge's place in the arrays
-- (from 1), so that each caller reads its own decision: the rows of an
-- INSERT come back in no promised order, and a row names its key, not its
-- caller, so the statement joins them back to their place by the key.
--
-- It locks the counters that exist in the arrays' order (the order every
-- batch takes its locks in, so that two batches never wait for each other
-- in a cycle), and only then reads the database clock, once, for every
-- charge (a charge with an injected clock decides with its own). The
-- DO UPDATE's WHERE is the decision, evaluated on the row version the
-- statement locked, after any concurrent charge committed (invariant 10).
-- The DO UPDATE sees a charge's parameters through excluded: updated_at
-- is now and tat − updated_at is n·T, as in consume_gcra; the burst B·T,
-- which no column carries, it reads from the input by the key.
--
-- A charge that the WHERE refused writes nothing and has no row in "up";
-- "cur" then reads its counter FOR UPDATE, the version "up" locked and
-- refused, and returns it with allowed false. A counter inserted by a
-- concurrent charge after the statement's snapshot is not seen by "cur":
-- a refusal on it returns no row, and the caller reads the state in a
-- second statement, as after consume_gcra. Tenancy and row-level security
-- are consume_gcra's: the batch is one tenant's, set with
-- set_config(…, true) before this statement, and every read and the
-- conflict target name the tenant.
-- $1 tenants, $2 scopes, $3 keys, $4 units n, $5 intervals T ms, $6 bursts B, $7 clocks (NULL: the database clock)
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
    WITH ORDINALITY AS u(tenant, scope, key, n, t, b, clock, i)
), locked AS (
  SELECT 1 FROM input AS u
  JOIN racefree_quotas AS l ON l.tenant = u.tenant AND l.scope = u.scope AND l.key = u.key AND l.kind = 'gcra'
  ORDER BY u.i FOR UPDATE OF l
), clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
  FROM (SELECT count(*) FROM locked) AS after_the_lock
), charge AS (
  SELECT u.tenant, u.scope, u.key, u.n * u.t AS step, u.b * u.t AS span, u.i, COALESCE(u.clock, clock.now) AS now
  FROM input AS u CROSS JOIN clock
), up AS (
  INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
  SELECT c.tenant, c.scope, c.key, 'gcra', c.now + c.step, 0, c.now, c.now + c.step FROM charge AS c
  ORDER BY c.i
  ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
    tat        = GREATEST(q.tat, excluded.updated_at) + (excluded.tat - excluded.updated_at),
    updated_at = excluded.updated_at,
    expires_at = GREATEST(q.tat, excluded.updated_at) + (excluded.tat - excluded.updated_at)
  WHERE GREATEST(q.tat, excluded.updated_at) + (excluded.tat - excluded.updated_at) <= excluded.updated_at
    + (SELECT c.span FROM charge AS c WHERE c.tenant = excluded.tenant AND c.scope = excluded.scope AND c.key = excluded.key)
  RETURNING q.tenant, q.scope, q.key, q.tat, q.used, q.updated_at
), cur AS (
  SELECT c.i, r.tat, r.used, c.now FROM charge AS c
  JOIN racefree_quotas AS r ON r.tenant = c.tenant AND r.scope = c.scope AND r.key = c.key AND r.kind = 'gcra'
  WHERE NOT EXISTS (SELECT 1 FROM up WHERE up.tenant = c.tenant AND up.scope = c.scope AND up.key = c.key)
  FOR UPDATE OF r
)
SELECT c.i, true AS allowed, up.tat, up.used, up.updated_at
FROM up JOIN charge AS c ON c.tenant = up.tenant AND c.scope = up.scope AND c.key = up.key
UNION ALL
SELECT cur.i, false, cur.tat, cur.used, cur.now FROM cur
