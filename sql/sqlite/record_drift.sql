-- Changes of one table in (:after_scn, :through_scn] may have been written by triggers that no longer
-- matched its columns (reason 'columns') or not at all (reason 'triggers': they were missing). Run by
-- install and by the poll, holding the write lock. Re-runnable: a range already recorded is kept.
INSERT OR IGNORE INTO _databus_drift (tbl, after_scn, through_scn, columns, reason)
VALUES (:tbl, :after_scn, :through_scn, :columns, :reason);
