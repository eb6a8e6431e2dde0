-- Fence floors: the highest fence the reaper has deleted in each claim
-- namespace. The reaper raises a namespace's floor in the same transaction
-- that deletes its rows, and a key acquired with no row starts one above
-- the floor, so a fence never goes backwards after a reap (a holder that
-- outlived its row can never meet its own fence again). A new table: code
-- that predates it neither reads nor writes it.
CREATE TABLE racefree_claim_floors (
  ns    TEXT   NOT NULL PRIMARY KEY,
  floor BIGINT NOT NULL
);
