-- now: the reaper's cutoff, read once per batch and bound to the batch's
-- statements as a constant, the same on both engines.
-- ?1 clock
SELECT COALESCE(?1, CAST(unixepoch('subsec') * 1000 AS INTEGER))
