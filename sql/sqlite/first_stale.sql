-- The first change in (:since_scn, :until_scn] written by out-of-date capture triggers, of the
-- captured tables (:tables, a JSON array of names): what capture names when it refuses a chunk.
SELECT tbl, scn
FROM _databus_txlog
WHERE scn > :since_scn AND scn <= :until_scn AND stale AND tbl IN (SELECT value FROM json_each(:tables))
ORDER BY scn
LIMIT 1;
