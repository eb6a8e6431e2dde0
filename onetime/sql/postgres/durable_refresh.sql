-- durable_refresh: on a primary with a synchronous standby, lock the
-- family that explain_refresh read FOR KEY SHARE, so that a Rotate
-- refused from it (Revoked, Expired) commits only once the standby has
-- what it read: the revocation or rotation it reports was committed by
-- another transaction, which may be on the primary alone (its wait for
-- the standby ended early), and a failover would bring the token back to
-- life after the caller was told it is revoked. As in durable_code, the
-- lock writes WAL and takes an xid, so this transaction's COMMIT waits
-- for the standby past the commit explain_refresh saw; without
-- synchronous_standby_names it reads nothing and costs nothing. The
-- other answers need no lock: Rotated and Reused write the family, and a
-- grace-window retry (Replayed) rewrites its row in reuse's UPDATE, so
-- their COMMITs wait for the standby already. KEY SHARE does not block
-- reuse's or revoke_families' UPDATE; rotate's, which changes head (a
-- unique key), waits for it, but never matches a revoked or expired
-- family, and a live one is answered here only when a rotation this
-- statement's snapshot could not see moved its head: a rotation of the
-- new head then waits for this COMMIT, the standby's wait, as its own
-- commit would. The reaper skips locked rows.
-- $1 tenant, $2 hash of the presented token
SELECT 1 FROM racefree_refresh_families AS f
WHERE f.tenant = $1 AND (f.head = $2 OR f.family = (
  SELECT r.family FROM racefree_refresh_retired AS r WHERE r.tenant = $1 AND r.hash = $2))
  AND current_setting('synchronous_standby_names') <> ''
FOR KEY SHARE OF f
