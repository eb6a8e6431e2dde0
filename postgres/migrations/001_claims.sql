-- Claims, first shape: a row means "won", forever (INSERT … ON CONFLICT DO
-- NOTHING). 002 turns them into leases; this shape stays readable by the
-- compatible mode of the claim package.
CREATE TABLE racefree_claims (
  ns         TEXT   NOT NULL,
  key        TEXT   NOT NULL,
  holder     TEXT   NOT NULL,
  count      BIGINT NOT NULL,
  first_seen BIGINT NOT NULL,
  last_seen  BIGINT NOT NULL,
  PRIMARY KEY (ns, key)
);
