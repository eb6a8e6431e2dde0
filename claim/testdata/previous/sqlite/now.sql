-- now: the process clock in Unix ms, read once by the reaper to compute a
-- batch's cutoff.
SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)
