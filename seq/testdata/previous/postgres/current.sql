-- current: the last number the (scope, name) counter handed out, as the
-- caller's snapshot sees it; no row means none was handed out yet. It
-- takes no lock: use Next, never Current + 1, to get a number.
-- $1 scope, $2 name
SELECT last FROM racefree_sequences WHERE scope = $1 AND name = $2
