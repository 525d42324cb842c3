-- Cuts the change stream at the newest SCN. Run inside BEGIN IMMEDIATE: holding the write lock, no
-- transaction is open, so every change at or below the cut belongs to a committed transaction and
-- the changes since the previous cut are whole transactions. Re-runnable: a cut already made is kept.
INSERT OR IGNORE INTO _databus_cuts (scn) SELECT max(scn) FROM _databus_txlog HAVING max(scn) IS NOT NULL;
