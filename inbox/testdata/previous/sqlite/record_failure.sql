-- Record an event as permanently failed, unless (source, event_id) is
-- already there. ?1 source, ?2 event_id, ?3 payload, ?4 clock (NULL: engine
-- clock), ?5 retention in ms, ?6 reason. One row back: recorded; no row: a
-- concurrent delivery recorded it first.
INSERT INTO racefree_inbox (source, event_id, status, reason, payload, received_at, expires_at)
VALUES (?1, ?2, 'failed', ?6, ?3,
        COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
        COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?5)
ON CONFLICT (source, event_id) DO NOTHING
RETURNING id
