-- $1 tenant, $2 row id, $3 seq.
UPDATE racefree_inbox SET seq = $3 WHERE tenant = $1 AND id = $2
