-- tenure: the message's current tenure, to tell a stale fence from a
-- message that is not leased.
-- ?1 tenant, ?2 id
SELECT state, fence FROM racefree_outbox WHERE tenant = ?1 AND id = ?2
