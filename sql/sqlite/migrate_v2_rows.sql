-- The second half of migrate_v2.sql, run after install.sql: every change of the version 2 txlog,
-- at its SCN, then the old objects dropped.
INSERT INTO _databus_txlog (scn, tbl, op, row, ts) SELECT scn, tbl, op, row, ts FROM _databus_txlog_v2 ORDER BY scn;
-- The highest SCN version 2 ever gave, though pruned since: the next change must come after it.
INSERT OR IGNORE INTO _databus_txlog (scn, tbl, op, row, ts)
    SELECT seq, '', 'm', '{}', 0 FROM sqlite_sequence WHERE name = '_databus_txlog_v2' AND seq > 0;
-- Each epoch was a window; the open one is complete too, since this runs holding the write lock.
INSERT OR IGNORE INTO _databus_cuts (scn) SELECT max(scn) FROM _databus_txlog_v2 GROUP BY epoch;
INSERT OR IGNORE INTO _databus_cuts (scn) SELECT max(scn) FROM _databus_txlog HAVING max(scn) IS NOT NULL;
-- Rows version 2 flagged stale were written after their table's columns changed: a marker after them
-- and a drift range over them, so the table's schema_changes policy decides (stop refuses them as the
-- flag did; otherwise the table is read again, since nothing can repair them now).
INSERT INTO _databus_txlog (tbl, op, row, ts)
    SELECT tbl, 'm', json_object('statement', 'capture version 2 wrote changes of ' || tbl || ' after its columns '
                                 || 'changed (stale changes not repaired)', 'reason', 'columns'), 0
    FROM _databus_txlog_v2 WHERE stale GROUP BY tbl ORDER BY tbl;
INSERT OR IGNORE INTO _databus_drift (tbl, after_scn, through_scn, columns, reason)
    SELECT v.tbl, min(v.scn) - 1, (SELECT max(t.scn) FROM _databus_txlog AS t WHERE t.tbl = v.tbl AND t.op = 'm'),
           '[]', 'columns'
    FROM _databus_txlog_v2 AS v WHERE v.stale GROUP BY v.tbl;
DROP TABLE _databus_txlog_v2;
DROP TABLE IF EXISTS _databus_epoch;
