-- The highest SCN ever given to a change (committed), or 0 before the first change. Pruning keeps the
-- newest txlog row, so this never goes back.
SELECT COALESCE(max(scn), 0) AS hwm FROM _databus_txlog;
