-- $1 row id, $2 seq.
UPDATE racefree_inbox SET seq = $2 WHERE id = $1
