-- Webhook inbox: one row per (source, event ID) received, kept for the
-- sender's retry horizon. The UNIQUE (source, event_id) constraint is what
-- makes a redelivery a duplicate; the row is inserted in the same
-- transaction as the event's processing, so a failed processing leaves no
-- row behind. seq is the per-source arrival order, assigned from
-- racefree_inbox_sources at the end of the receiving transaction so that
-- seq order is commit order (a reader paging with "after" never skips a
-- row that commits late); it is NULL only inside that transaction.
CREATE TABLE racefree_inbox_sources (
  source   TEXT   PRIMARY KEY,
  last_seq BIGINT NOT NULL
);
CREATE TABLE racefree_inbox (
  id          INTEGER PRIMARY KEY,
  source      TEXT   NOT NULL,
  event_id    TEXT   NOT NULL,
  seq         BIGINT,
  status      TEXT   NOT NULL CHECK (status IN ('processed', 'failed')),
  reason      TEXT,
  payload     BLOB,
  received_at BIGINT NOT NULL,
  expires_at  BIGINT NOT NULL,
  UNIQUE (source, event_id)
);
CREATE UNIQUE INDEX racefree_inbox_source_seq ON racefree_inbox (source, seq);
CREATE INDEX racefree_inbox_expires_at ON racefree_inbox (expires_at);
