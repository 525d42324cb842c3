-- The highest SCN ever allocated by the txlog (committed), or 0 before the first change.
SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '_databus_txlog'), 0) AS hwm;
