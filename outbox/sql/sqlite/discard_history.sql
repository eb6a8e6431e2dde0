-- discard_history: delete the history of the dead messages discard is
-- about to delete, in the same IMMEDIATE transaction.
-- ?1 tenant, ?2 ids (JSON array; empty: any), ?3 topic ('': any),
-- ?4 key ('': any)
DELETE FROM racefree_outbox_attempts
 WHERE tenant = ?1
   AND message_id IN (
         SELECT id FROM racefree_outbox
          WHERE tenant = ?1 AND state = 'dead'
            AND (json_array_length(?2) = 0 OR id IN (SELECT value FROM json_each(?2)))
            AND (?3 = '' OR topic = ?3)
            AND (?4 = '' OR key = ?4))
