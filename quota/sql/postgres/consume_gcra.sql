-- consume_gcra: charge $3 units to the GCRA counter of ($1 scope, $2 key)
-- and record the charge, in this one statement, or change nothing.
-- $4 is the emission interval T in ms (Per / Rate, rounded up), $5 the
-- burst B, $6 the clock (NULL: the database clock, clock_timestamp()).
--
-- The counter is its theoretical arrival time (tat): the instant at which
-- the bucket is full again. A charge moves it to max(tat, now) + n*T and is
-- allowed when that is at most now + B*T, i.e. when at least n of the B
-- units have refilled. A key with no row is a full bucket: the INSERT
-- starts it at now + n*T (n <= B is checked before). The DO UPDATE's WHERE
-- is the decision, and it is evaluated on the row version the statement
-- locked, after any concurrent charge committed (invariant 10): when it
-- fails, nothing is written and no row is returned, and the caller reads
-- the state to say how long to wait. excluded.updated_at carries now into
-- the DO UPDATE. expires_at is the new tat: from then on the row means the
-- same as no row, and the reaper may delete it.
INSERT INTO racefree_quotas AS q (scope, key, kind, tat, used, updated_at, expires_at)
SELECT $1, $2, 'gcra', now + $3::bigint * $4::bigint, 0, now, now + $3::bigint * $4::bigint
FROM (SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
ON CONFLICT (scope, key, kind) DO UPDATE SET
  tat        = GREATEST(q.tat, excluded.updated_at) + $3::bigint * $4::bigint,
  updated_at = excluded.updated_at,
  expires_at = GREATEST(q.tat, excluded.updated_at) + $3::bigint * $4::bigint
WHERE GREATEST(q.tat, excluded.updated_at) + $3::bigint * $4::bigint <= excluded.updated_at + $5::bigint * $4::bigint
RETURNING tat, used, updated_at
