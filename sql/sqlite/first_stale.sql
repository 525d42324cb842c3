-- The first change in (:since_scn, :until_scn] of the captured tables (:tables, a JSON array of names)
-- that a drift range covers, with the range's columns and reason: written after its table's columns
-- changed, by triggers rendered for the old ones, so its image may lack columns or name them wrongly
-- (reason 'columns'); or the marker row install wrote when it found the table's triggers missing, so
-- changes may be lost (reason 'triggers'). Only tables whose schema_changes policy is stop are asked. The drift table is tiny; the txlog is probed by SCN only
-- where a range overlaps the poll. The last column is the statement of the range's marker (its through_scn):
-- what install found, in its words (a rename names the table's new name).
SELECT d.tbl, min(t.scn) AS scn, d.columns, d.reason,
       (SELECT json_extract(m.row, '$.statement') FROM _databus_txlog AS m
        WHERE m.scn = d.through_scn AND m.op = 'm') AS statement
FROM _databus_drift AS d
JOIN _databus_txlog AS t
  ON t.scn > max(d.after_scn, :since_scn) AND t.scn <= min(d.through_scn, :until_scn) AND t.tbl = d.tbl
 AND (t.op != 'm' OR d.reason = 'triggers')  -- a column change's own marker is no stale change
WHERE d.through_scn > :since_scn AND d.after_scn < :until_scn
  AND d.tbl IN (SELECT value FROM json_each(:tables))
GROUP BY d.tbl, d.after_scn
ORDER BY scn
LIMIT 1;
