-- Install found a captured table's triggers attached to another table: the table was renamed (SQLite's
-- own way to rebuild one: ALTER TABLE t RENAME TO t_old; CREATE TABLE t ...) and the triggers moved with
-- it, while their rows still name the old table. Every change logged under :tbl after the last check
-- (:after_scn, when the triggers were last seen on their table) may be the renamed table's, so none may
-- reach :tbl's snapshot: they go, and the table is read again. Rows above the last check were never cut,
-- so no change log holds them. The marker install just wrote (:marker_scn, the newest row) stays, so the
-- txlog's largest SCN never goes back. Re-runnable: a second run finds nothing more to drop.
DELETE FROM _databus_txlog WHERE tbl = :tbl AND op != 'm' AND scn > :after_scn AND scn < :marker_scn;
