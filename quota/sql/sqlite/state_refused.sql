-- state_refused: read the counter of (?1 tenant, ?2 scope, ?3 key, ?4
-- kind) and the clock (?5, the charge's: NULL, the process clock), as
-- state does, only when the statement just before it on this connection
-- changed no row. The combiner's batch runs it right after a charge
-- (consume_gcra, consume_window) in the same transaction, when a later
-- charge of the same key follows in the batch (SQLite's batch holds
-- several charges of one key, one after the other), so that a refused
-- charge reads the counter it was refused on before the later charges
-- move it. changes() counts the rows the last INSERT, UPDATE or DELETE
-- changed: 0 after a charge whose DO UPDATE's WHERE refused it; 1 after
-- an allowed charge, which needs no read: no row then.
SELECT now,
  (SELECT tat FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = ?4),
  (SELECT used FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = ?4)
FROM (SELECT COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE changes() = 0
