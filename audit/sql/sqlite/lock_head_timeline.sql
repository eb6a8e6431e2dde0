-- lock_head_timeline: lock_head from migration 018 (TimelineVersion) on.
-- SQLite has no timelines: both timelines are NULL, and Append records
-- none (the head row's timeline stays NULL).
-- ?1 tenant, ?2 scope, ?3 clock (NULL: the process clock)
SELECT last_seq, last_mac, key_id, COALESCE(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)), NULL, NULL
FROM racefree_audit_heads WHERE tenant = ?1 AND scope = ?2
