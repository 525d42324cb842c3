-- Install found a table's triggers missing: its changes since the last check may never have reached
-- the txlog. This marker row gives that loss a position in the stream (the next SCN), which
-- record_drift.sql then covers, so the poll that reaches it applies the schema_changes policy.
INSERT INTO _databus_txlog (tbl, op, row, ts) VALUES (:tbl, 'm', '{}', 0) RETURNING scn;
