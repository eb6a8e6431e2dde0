-- Delete at most ?2 expired events. ?1 clock (NULL: engine clock).
DELETE FROM racefree_inbox
WHERE id IN (
  SELECT id FROM racefree_inbox
  WHERE expires_at <= COALESCE(?1, CAST(unixepoch('subsec') * 1000 AS INTEGER))
  ORDER BY expires_at
  LIMIT ?2
)
