-- Record an event as processed, unless (tenant, source, event_id) is
-- already there. ?1 tenant, ?2 source, ?3 event_id, ?4 payload, ?5 clock
-- (NULL: engine clock), ?6 retention in ms. One row back: new; no row: a
-- duplicate.
INSERT INTO racefree_inbox (tenant, source, event_id, status, payload, received_at, expires_at)
VALUES (?1, ?2, ?3, 'processed', ?4,
        COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
        COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?6)
ON CONFLICT (tenant, source, event_id) DO NOTHING
RETURNING id
