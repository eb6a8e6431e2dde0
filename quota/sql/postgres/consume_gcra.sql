-- consume_gcra: charge $4 units to the GCRA counter of ($1 tenant, $2
-- scope, $3 key) and record the charge, in this one statement, or change
-- nothing; either way it returns the decision and the counter, in one
-- round trip. $5 is the emission interval T in ms (Per / Rate, rounded
-- up), $6 the burst B, $7 the clock (NULL: the database clock,
-- clock_timestamp(), read once in the clock CTE).
--
-- The counter is its theoretical arrival time (tat): the instant at which
-- the bucket is full again. A charge moves it to max(tat, now) + n*T and is
-- allowed when that is at most now + B*T, i.e. when at least n of the B
-- units have refilled. A key with no row is a full bucket: the INSERT
-- starts it at now + n*T (n <= B is checked before). The DO UPDATE's WHERE
-- is the decision, evaluated on the row version the statement locked,
-- after any concurrent charge committed (invariant 10). excluded.updated_at
-- carries now into the DO UPDATE. expires_at is the new tat: from then on
-- the row means the same as no row, and the reaper may delete it. The
-- conflict target is the key that leads with the tenant (migration 011
-- adds it, 012 makes it the primary key).
--
-- When the WHERE fails, nothing is written and "up" returns no row. "cur"
-- then reads the counter so that the caller can say exactly how long to
-- wait: it runs after "up" (it reads it), and FOR UPDATE makes it return
-- the row version "up" locked and refused, not the older one of the
-- statement's snapshot (the lock is already this transaction's). A row
-- that a concurrent charge inserted after the snapshot is not seen at all:
-- the statement then returns no row, and the caller reads the state in a
-- second statement.
WITH clock AS (
  SELECT COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
), up AS (
  INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
  SELECT $1, $2, $3, 'gcra', now + $4::bigint * $5::bigint, 0, now, now + $4::bigint * $5::bigint FROM clock
  ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
    tat        = GREATEST(q.tat, excluded.updated_at) + $4::bigint * $5::bigint,
    updated_at = excluded.updated_at,
    expires_at = GREATEST(q.tat, excluded.updated_at) + $4::bigint * $5::bigint
  WHERE GREATEST(q.tat, excluded.updated_at) + $4::bigint * $5::bigint <= excluded.updated_at + $6::bigint * $5::bigint
  RETURNING tat, used, updated_at
), cur AS (
  SELECT c.tat, c.used FROM racefree_quotas AS c
  WHERE c.tenant = $1 AND c.scope = $2 AND c.key = $3 AND c.kind = 'gcra' AND NOT EXISTS (SELECT 1 FROM up)
  FOR UPDATE
)
SELECT true AS allowed, tat, used, updated_at FROM up
UNION ALL
SELECT false, cur.tat, cur.used, clock.now FROM cur, clock
