-- reuse: a presented token that rotate did not accept and that was
-- retired by an earlier rotation is either a retry of the family's latest
-- rotation within the grace window, or reuse (RFC 9700 §4.14.2). This one
-- UPDATE of the family row decides which, on the row's latest version.
-- Within the grace window (the token is the family's prev, its successor
-- is still the head and has not expired, and now < rotated_at + grace)
-- revoked_at stays NULL and the caller hands back the same successor;
-- otherwise revoked_at is set, and every token of the family is refused
-- from then on. A revoked family (revoked_at IS NULL fails) matches
-- nothing. The retired row only names the family: it never changes.
-- prev and rotated_at are NULL until a family's first rotation: the CASE
-- lists the grace conditions and keeps NULL (no revocation) only when all
-- of them are true, so a NULL on either side, which makes a condition
-- unknown, revokes. Never write it as the negation ("WHEN prev <> … OR …
-- THEN now ELSE NULL"), where unknown would fall to the grace branch.
-- ?1 tenant, ?2 hash of the presented token, ?3 hash of its successor, ?4 grace ms, ?5 clock
UPDATE racefree_refresh_families AS f
SET revoked_at = CASE WHEN f.prev = ?2 AND f.head = ?3
                       AND clock.now < f.rotated_at + ?4 AND clock.now < f.head_expires_at
                      THEN NULL ELSE clock.now END
FROM (SELECT COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock,
     racefree_refresh_retired AS r
WHERE r.tenant = ?1 AND r.hash = ?2
  AND f.tenant = r.tenant AND f.family = r.family AND f.revoked_at IS NULL
RETURNING revoked_at IS NULL, subject, head_expires_at, generation
