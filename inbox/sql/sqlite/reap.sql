-- Delete at most ?3 of tenant ?1's expired events. ?2 clock (NULL: engine
-- clock).
DELETE FROM racefree_inbox
WHERE id IN (
  SELECT id FROM racefree_inbox
  WHERE tenant = ?1 AND expires_at <= COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER))
  ORDER BY expires_at
  LIMIT ?3
)
