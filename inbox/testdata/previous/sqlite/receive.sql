-- Record an event as processed, unless (source, event_id) is already there.
-- ?1 source, ?2 event_id, ?3 payload, ?4 clock (NULL: engine clock),
-- ?5 retention in ms. One row back: new; no row: a duplicate.
INSERT INTO racefree_inbox (source, event_id, status, payload, received_at, expires_at)
VALUES (?1, ?2, 'processed', ?3,
        COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
        COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?5)
ON CONFLICT (source, event_id) DO NOTHING
RETURNING id
