-- verify_entries: a tenant's scope's entries numbered after one number
-- through another (one part of the chain, when Verify streams several at
-- once), in number order, for Verify, in as few columns as carry them unambiguously (each
-- column read costs the driver several calls into SQLite): the texts
-- actor, action, subject and key_id joined by NUL bytes, which none of
-- them may contain (CheckText), so that a row with more than three NULs
-- was written by someone else, and the stored prev_mac followed by the
-- MAC, NULL unless the MAC is 32 bytes long, so that the split is exact.
-- ?1 tenant, ?2 scope, ?3 after, ?4 through (the largest BIGINT: to the end)
SELECT seq, at, actor || char(0) || action || char(0) || subject || char(0) || key_id, data,
  CASE WHEN length(mac) = 32 THEN CAST(prev_mac || mac AS BLOB) END
FROM racefree_audit
WHERE tenant = ?1 AND scope = ?2 AND seq > ?3 AND seq <= ?4
ORDER BY seq
