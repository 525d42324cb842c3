-- Install found a table's columns changed, or its triggers missing, since the last check: this marker
-- row places the change in the stream (the next SCN). :change is JSON: the change as a statement and
-- its reason. The poll turns it into a DDL record, which the table's schema_changes policy acts on.
INSERT INTO _databus_txlog (tbl, op, row, ts)
VALUES (:tbl, 'm', :change, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
RETURNING scn;
