-- claim_due: the due messages of tenant ?1 a claim takes, oldest due
-- first: ready and available, or leased and lapsed (a lease lives while
-- now < available_at). It runs in the claim's IMMEDIATE transaction, which
-- holds SQLite's only write lock until claim_take has leased them, so no
-- other claimer can take them in between.
--
-- Ordered messages (per-key ordering) are claimable only when no older
-- message of their key is undelivered: ready, leased (retrying) or dead
-- (until redriven or discarded).
-- ?1 tenant, ?2 topics (JSON array; empty: every topic), ?3 limit, ?4 now
SELECT m.id, m.state, m.leased_by
  FROM racefree_outbox AS m
 WHERE m.tenant = ?1
   AND m.state IN ('ready', 'leased')
   AND m.available_at <= ?4
   AND (json_array_length(?2) = 0 OR m.topic IN (SELECT value FROM json_each(?2)))
   AND (NOT m.ordered OR NOT EXISTS (
         SELECT 1 FROM racefree_outbox AS p
          WHERE p.tenant = m.tenant AND p.topic = m.topic AND p.key = m.key AND p.key <> ''
            AND p.id < m.id AND p.state IN ('ready', 'leased', 'dead')))
 ORDER BY m.available_at, m.id
 LIMIT ?3
