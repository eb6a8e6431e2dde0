-- Gapless counters: one row per (scope, name) holding the last number
-- handed out. The scope leads the key so that it can become the tenant
-- without a data migration. A row is created by the first Next of its
-- counter and incremented in place under its own row lock, so counters never
-- wait for each other. No timestamps: reading the clock in every increment
-- cost SQLite a third of the statement, and no decision depends on it. A
-- new table: code that predates it never reads it.
CREATE TABLE racefree_sequences (
  scope TEXT   NOT NULL,
  name  TEXT   NOT NULL,
  last  BIGINT NOT NULL,
  PRIMARY KEY (scope, name)
);
