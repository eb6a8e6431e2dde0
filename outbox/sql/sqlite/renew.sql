-- renew: the heartbeat. Extend to now + ?3 ms the leases of the tenures
-- (id, fence) that are current and still live; a lease that lapsed is not
-- revived, even if nobody took it over: its holder learns it lost it.
-- ?1 tenant, ?2 tenures (JSON array of [id, fence]), ?3 lease ms, ?4 clock
UPDATE racefree_outbox
   SET available_at = COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?3
 WHERE tenant = ?1 AND state = 'leased'
   AND (id, fence) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?2))
   AND available_at > COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER))
RETURNING id, fence, available_at
