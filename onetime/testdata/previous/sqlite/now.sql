-- now: the process clock in Unix ms, read once by Reap so that the two
-- statements of a batch select the same families.
SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)
