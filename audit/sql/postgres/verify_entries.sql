-- verify_entries: a tenant's scope's entries numbered after one number
-- through another (one part of the chain, when Verify streams several at
-- once), in number order, for Verify, in the columns the SQLite statement of the same name
-- returns: the texts actor, action, subject and key_id joined by NUL
-- bytes, which none of them may contain (CheckText), and the stored
-- prev_mac followed by the MAC, NULL unless the MAC is 32 bytes long.
-- $1 tenant, $2 scope, $3 after, $4 through (the largest bigint: to the end)
SELECT seq, at,
  convert_to(actor, 'UTF8') || '\x00'::bytea || convert_to(action, 'UTF8') || '\x00'::bytea ||
  convert_to(subject, 'UTF8') || '\x00'::bytea || convert_to(key_id, 'UTF8'),
  data,
  CASE WHEN length(mac) = 32 THEN prev_mac || mac END
FROM racefree_audit
WHERE tenant = $1 AND scope = $2 AND seq > $3 AND seq <= $4
ORDER BY seq
