-- Quotas: the sliding-window counter (kind 'sliding_window'). Its row holds
-- the start of the current window in tat, the units charged in it in used,
-- and those of the window before in prev, a new column: NULL on the rows
-- of the other kinds, which never read it. SQLite cannot change a CHECK in
-- place, so racefree_quotas is rebuilt with the wider CHECK and the same
-- key and index; every column the previous release reads is kept as it
-- was, so its statements keep working on the rebuilt table.
CREATE TABLE racefree_quotas_new (
  tenant     TEXT   NOT NULL,
  scope      TEXT   NOT NULL,
  key        TEXT   NOT NULL,
  kind       TEXT   NOT NULL CHECK (kind IN ('gcra', 'window', 'sliding_window')),
  tat        BIGINT NOT NULL,
  used       BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  prev       BIGINT,
  PRIMARY KEY (tenant, scope, key, kind)
);
INSERT INTO racefree_quotas_new (tenant, scope, key, kind, tat, used, updated_at, expires_at) SELECT tenant, scope, key, kind, tat, used, updated_at, expires_at FROM racefree_quotas;
DROP TABLE racefree_quotas;
ALTER TABLE racefree_quotas_new RENAME TO racefree_quotas;
CREATE INDEX racefree_quotas_expires_at ON racefree_quotas (tenant, scope, expires_at);
