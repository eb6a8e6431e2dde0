-- state_sliding_refused: read the sliding-window counter of (?1 tenant,
-- ?2 scope, ?3 key) and the clock (?4, the charge's: NULL, the process
-- clock), as state_sliding does, only when the statement just before it
-- on this connection changed no row: the combiner's batch runs it right
-- after a charge (consume_sliding) that a later charge of the same key
-- follows, so that a refused charge reads the counter it was refused on
-- before the later charges move it (state_refused says why). After an
-- allowed charge (changes() is 1) it returns no row.
SELECT now,
  (SELECT tat FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window'),
  (SELECT used FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window'),
  (SELECT prev FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window')
FROM (SELECT COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE changes() = 0
