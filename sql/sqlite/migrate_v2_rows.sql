-- The second half of migrate_v2.sql, run after install.sql: every change of the version 2 txlog,
-- at its SCN, then the old objects dropped.
INSERT INTO _databus_txlog (scn, tbl, op, row, ts) SELECT scn, tbl, op, row, ts FROM _databus_txlog_v2 ORDER BY scn;
-- The highest SCN version 2 ever gave, though pruned since: the next change must come after it.
INSERT OR IGNORE INTO _databus_txlog (scn, tbl, op, row, ts)
    SELECT seq, '', 'm', '{}', 0 FROM sqlite_sequence WHERE name = '_databus_txlog_v2' AND seq > 0;
-- Each epoch was a window; the open one is complete too, since this runs holding the write lock.
INSERT OR IGNORE INTO _databus_cuts (scn) SELECT max(scn) FROM _databus_txlog_v2 GROUP BY epoch;
INSERT OR IGNORE INTO _databus_cuts (scn) SELECT max(scn) FROM _databus_txlog HAVING max(scn) IS NOT NULL;
-- Rows version 2 flagged stale become drift ranges, which the poll treats as it treated the flag.
INSERT OR IGNORE INTO _databus_drift (tbl, after_scn, through_scn, columns, reason)
    SELECT tbl, min(scn) - 1, max(scn), '[]', 'columns' FROM _databus_txlog_v2 WHERE stale GROUP BY tbl;
DROP TABLE _databus_txlog_v2;
DROP TABLE IF EXISTS _databus_epoch;
