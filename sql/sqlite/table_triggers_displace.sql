-- Capture triggers for a table with UNIQUE constraints beside its key (table_triggers.sql's, plus the capture of
-- the rows a REPLACE conflict deletes). INSERT OR REPLACE, REPLACE INTO and UPDATE OR REPLACE delete every row
-- whose value of another UNIQUE constraint (or rowid) the new row takes, and fire no delete trigger for them
-- (unless the application turned recursive_triggers on). So:
--   * a BEFORE trigger records, in _databus_displaced, the key of every row the new row's values could
--     displace ({match_new}: each constraint's columns equal under its index's collation; a superset, since
--     it ignores a partial index's WHERE and the new row may yet be ignored);
--   * the AFTER trigger of the same row writes a delete for each recorded key no row holds any more, before
--     the row's own change, so the delete comes first in the window; then forgets the records.
-- Exact whatever the conflict clause: a plain conflict aborts the statement and its trigger writes with it;
-- IGNORE, DO NOTHING and DO UPDATE (whose update has its own triggers) never reach this AFTER INSERT, and the
-- next BEFORE trigger of the table forgets their records; a row that is still there was not displaced. The
-- delete trigger forgets its row's record, so a displaced row whose delete trigger fired (recursive_triggers)
-- is deleted once. Placeholders are quoted identifiers, literals and expressions built by Python from
-- validated names.

DROP TRIGGER IF EXISTS {trg_displace};
CREATE TRIGGER {trg_displace} BEFORE INSERT ON {table}
BEGIN
    DELETE FROM _databus_displaced WHERE tbl = {table_literal};
    INSERT INTO _databus_displaced (tbl, {key_slots})
    SELECT {table_literal}, {cur_key} FROM {table} AS cur WHERE {match_new};
END;

DROP TRIGGER IF EXISTS {trg_displace_update};
CREATE TRIGGER {trg_displace_update} BEFORE UPDATE OF {unique_names} ON {table}
BEGIN
    DELETE FROM _databus_displaced WHERE tbl = {table_literal};
    INSERT INTO _databus_displaced (tbl, {key_slots})
    SELECT {table_literal}, {cur_key} FROM {table} AS cur WHERE ({match_new}) AND NOT ({cur_is_old});
END;

DROP TRIGGER IF EXISTS {trg_insert};
CREATE TRIGGER {trg_insert} AFTER INSERT ON {table}
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts, {key_slots})
    SELECT tbl, 'd', {key_marker}, {now_ms}, {key_slots} FROM _databus_displaced AS gone
    WHERE tbl = {table_literal} AND NOT EXISTS (SELECT 1 FROM {table} AS cur WHERE {cur_is_gone})
    ORDER BY gone.rowid;
    DELETE FROM _databus_displaced WHERE tbl = {table_literal};
    INSERT INTO _databus_txlog (tbl, op, row, ts, {row_slots})
    VALUES ({table_literal}, 'i', {row_marker}, {now_ms}, {new_row});
END;

DROP TRIGGER IF EXISTS {trg_update};
CREATE TRIGGER {trg_update} AFTER UPDATE ON {table}
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts, {key_slots})
    SELECT tbl, 'd', {key_marker}, {now_ms}, {key_slots} FROM _databus_displaced AS gone
    WHERE tbl = {table_literal} AND NOT EXISTS (SELECT 1 FROM {table} AS cur WHERE {cur_is_gone})
    ORDER BY gone.rowid;
    DELETE FROM _databus_displaced WHERE tbl = {table_literal};
    INSERT INTO _databus_txlog (tbl, op, row, ts, {row_slots})
    VALUES ({table_literal}, CASE WHEN {key_unchanged} THEN 'u' ELSE 'i' END, {row_marker}, {now_ms}, {new_row});
END;

DROP TRIGGER IF EXISTS {trg_rekey};
CREATE TRIGGER {trg_rekey} AFTER UPDATE OF {key_names} ON {table} WHEN NOT ({key_unchanged})
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts, {key_slots})
    VALUES ({table_literal}, 'd', {key_marker}, {now_ms}, {old_key});
END;

DROP TRIGGER IF EXISTS {trg_delete};
CREATE TRIGGER {trg_delete} AFTER DELETE ON {table}
BEGIN
    DELETE FROM _databus_displaced WHERE tbl = {table_literal} AND {gone_is_old};
    INSERT INTO _databus_txlog (tbl, op, row, ts, {key_slots})
    VALUES ({table_literal}, 'd', {key_marker}, {now_ms}, {old_key});
END;
