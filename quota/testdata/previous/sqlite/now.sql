-- now: the process clock in Unix ms, as every quota statement reads it.
SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)
