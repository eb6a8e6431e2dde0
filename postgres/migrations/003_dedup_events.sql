-- Event de-duplication: one row per fingerprint, with the fields the
-- downstream processing writes. The occurrence figures and the lease live in
-- racefree_claims (namespace 'dedup'), so that one statement counts and
-- elects at once.
CREATE TABLE racefree_dedup_events (
  fingerprint    TEXT   NOT NULL PRIMARY KEY,
  source         TEXT   NOT NULL,
  level          TEXT   NOT NULL,
  message        TEXT   NOT NULL,
  classification TEXT,
  external_id    TEXT,
  result_fence   BIGINT,
  result_at      BIGINT
);
