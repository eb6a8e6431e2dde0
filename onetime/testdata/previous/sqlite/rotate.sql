-- rotate: replace the family's live token with its successor. The
-- UPDATE's WHERE is the decision: the presented token is the family's
-- head, the family is not revoked, and the head is live (now <
-- head_expires_at). SQLite runs one writer at a time: of concurrent
-- rotations of one token the first moves head and the others match
-- nothing, so a family never has two successors of one token. The caller
-- runs retire next, in the same transaction. The successor's hash (?3) is
-- computed by the caller; the successor itself is never stored.
-- ?1 tenant, ?2 hash of the presented token, ?3 hash of its successor, ?4 clock
UPDATE racefree_refresh_families AS f
SET head = ?3, prev = f.head, rotated_at = clock.now,
    head_expires_at = clock.now + f.ttl_ms, generation = f.generation + 1
FROM (SELECT COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE f.tenant = ?1 AND f.head = ?2 AND f.revoked_at IS NULL AND clock.now < f.head_expires_at
RETURNING subject, head_expires_at, generation, family, rotated_at
