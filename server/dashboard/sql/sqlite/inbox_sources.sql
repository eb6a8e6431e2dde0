-- inbox_sources: the tenant's webhook sources and the arrival number of
-- each one's last event (how many it has received), by name. Bounded by
-- the limit.
-- ?1 tenant, ?2 limit
SELECT source, last_seq FROM racefree_inbox_sources WHERE tenant = ?1 ORDER BY source LIMIT ?2
