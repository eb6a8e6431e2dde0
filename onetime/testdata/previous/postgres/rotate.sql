-- rotate: replace the family's live token with its successor and retire
-- the old one, in one statement. The UPDATE's WHERE is the decision: the
-- presented token is the family's head, the family is not revoked, and
-- the head is live (now < head_expires_at). Of concurrent rotations of one
-- token, the first moves head; the others wait for its row lock and,
-- re-checking this WHERE on the new version (head is now the successor),
-- match nothing, so a family never has two successors of one token. The
-- retired hash is recorded in the same statement, for reuse detection.
-- The successor's hash ($3) is computed by the caller; the successor
-- itself is never stored.
-- $1 tenant, $2 hash of the presented token, $3 hash of its successor, $4 clock
WITH clock AS (
  SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
), rotated AS (
  UPDATE racefree_refresh_families AS f
  SET head = $3, prev = f.head, rotated_at = clock.now,
      head_expires_at = clock.now + f.ttl_ms, generation = f.generation + 1
  FROM clock
  WHERE f.tenant = $1 AND f.head = $2 AND f.revoked_at IS NULL AND clock.now < f.head_expires_at
  RETURNING f.family, f.subject, f.head_expires_at, f.generation, f.rotated_at
), retired AS (
  INSERT INTO racefree_refresh_retired (tenant, hash, family, retired_at)
  SELECT $1, $2, family, rotated_at FROM rotated
)
SELECT subject, head_expires_at, generation FROM rotated
