-- durability: the connection's journal mode and synchronous level
-- (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA), which together decide what a power
-- loss or an operating system crash can do to commits and to the file.
SELECT (SELECT journal_mode FROM pragma_journal_mode), (SELECT synchronous FROM pragma_synchronous)
