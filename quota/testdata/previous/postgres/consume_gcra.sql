-- consume_gcra: charge $3 units to the GCRA counter of ($1 scope, $2 key)
-- and record the charge, in this one statement, or change nothing; either
-- way it returns the decision and the counter, in one round trip.
-- $4 is the emission interval T in ms (Per / Rate, rounded up), $5 the
-- burst B, $6 the clock (NULL: the database clock, clock_timestamp(),
-- read once in the clock CTE).
--
-- The counter is its theoretical arrival time (tat): the instant at which
-- the bucket is full again. A charge moves it to max(tat, now) + n*T and is
-- allowed when that is at most now + B*T, i.e. when at least n of the B
-- units have refilled. A key with no row is a full bucket: the INSERT
-- starts it at now + n*T (n <= B is checked before). The DO UPDATE's WHERE
-- is the decision, evaluated on the row version the statement locked,
-- after any concurrent charge committed (invariant 10). excluded.updated_at
-- carries now into the DO UPDATE. expires_at is the new tat: from then on
-- the row means the same as no row, and the reaper may delete it.
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
  SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
), up AS (
  INSERT INTO racefree_quotas AS q (scope, key, kind, tat, used, updated_at, expires_at)
  SELECT $1, $2, 'gcra', now + $3::bigint * $4::bigint, 0, now, now + $3::bigint * $4::bigint FROM clock
  ON CONFLICT (scope, key, kind) DO UPDATE SET
    tat        = GREATEST(q.tat, excluded.updated_at) + $3::bigint * $4::bigint,
    updated_at = excluded.updated_at,
    expires_at = GREATEST(q.tat, excluded.updated_at) + $3::bigint * $4::bigint
  WHERE GREATEST(q.tat, excluded.updated_at) + $3::bigint * $4::bigint <= excluded.updated_at + $5::bigint * $4::bigint
  RETURNING tat, used, updated_at
), cur AS (
  SELECT c.tat, c.used FROM racefree_quotas AS c
  WHERE c.scope = $1 AND c.key = $2 AND c.kind = 'gcra' AND NOT EXISTS (SELECT 1 FROM up)
  FOR UPDATE
)
SELECT true AS allowed, tat, used, updated_at FROM up
UNION ALL
SELECT false, cur.tat, cur.used, clock.now FROM cur, clock
