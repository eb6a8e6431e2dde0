-- One-time codes and refresh-token families. Only the SHA-256 of a token
-- is stored, never the token. Every key and index leads with tenant (the
-- Store's scope), so that tenancy adds no column to these tables.
--
-- A code is redeemed by one conditional UPDATE that sets used_at where it
-- is NULL: the row, not the caller, decides who redeemed it.
CREATE TABLE racefree_onetime_codes (
  tenant     TEXT   NOT NULL,
  hash       BYTEA  NOT NULL,
  purpose    TEXT   NOT NULL,
  subject    TEXT   NOT NULL,
  issued_at  BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  used_at    BIGINT,
  revoked_at BIGINT,
  PRIMARY KEY (tenant, hash)
);
CREATE INDEX racefree_onetime_codes_subject ON racefree_onetime_codes (tenant, purpose, subject);
CREATE INDEX racefree_onetime_codes_expires_at ON racefree_onetime_codes (tenant, expires_at);

-- A refresh-token family has one row, and head is the hash of its only
-- live token: a rotation is one conditional UPDATE of head, so two
-- rotations of one token can never both win, and a family can never have
-- two live tokens. revoked_at, once set, refuses every token of the
-- family. prev and rotated_at describe the latest rotation, for the grace
-- window in which a retry of it gets the same successor back.
CREATE TABLE racefree_refresh_families (
  tenant          TEXT   NOT NULL,
  family          BYTEA  NOT NULL,
  subject         TEXT   NOT NULL,
  ttl_ms          BIGINT NOT NULL,
  head            BYTEA  NOT NULL,
  head_expires_at BIGINT NOT NULL,
  prev            BYTEA,
  rotated_at      BIGINT,
  generation      BIGINT NOT NULL,
  created_at      BIGINT NOT NULL,
  revoked_at      BIGINT,
  PRIMARY KEY (tenant, family),
  UNIQUE (tenant, head)
);
CREATE INDEX racefree_refresh_families_subject ON racefree_refresh_families (tenant, subject);
CREATE INDEX racefree_refresh_families_expires_at ON racefree_refresh_families (tenant, head_expires_at);

-- Every token a rotation retired, so that presenting it again is
-- recognised as reuse and revokes its family.
CREATE TABLE racefree_refresh_retired (
  tenant     TEXT   NOT NULL,
  hash       BYTEA  NOT NULL,
  family     BYTEA  NOT NULL,
  retired_at BIGINT NOT NULL,
  PRIMARY KEY (tenant, hash)
);
CREATE INDEX racefree_refresh_retired_family ON racefree_refresh_retired (tenant, family);
