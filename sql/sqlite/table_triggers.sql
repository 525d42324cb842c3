-- Capture triggers for one table (the port of Databus's per-table before insert/update trigger,
-- extended to deletes and key changes). Re-runnable: each trigger is dropped and created again.
-- Placeholders are quoted identifiers, literals and column lists built by Python from validated names.
--
-- Each trigger appends one txlog row holding the row's values as they are, in the value columns (a delete:
-- the key's columns only, as Databus's delete shadow tables hold them), and in row the marker of the layout
-- that names them ({row_marker} the row, {key_marker} the key; _databus_layouts): no function call, no read
-- of another table, no per-row check (a changed column list is found by the poll and by install, which
-- compare the table with _databus_shapes). The value columns have no type, so SQLite keeps each value as
-- stored: a REAL's exact double, a BLOB's bytes, text as its bytes. The view _databus_images makes the JSON
-- row image of each (render.py); writing the JSON here cost an application's write 3.5 times a plain one.

DROP TRIGGER IF EXISTS {trg_insert};
CREATE TRIGGER {trg_insert} AFTER INSERT ON {table}
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts, {row_slots})
    VALUES ({table_literal}, 'i', {row_marker}, {now_ms}, {new_row});
END;

-- Every update writes the new row: an insert of the new key when the key changed (the rekey trigger
-- writes the delete of the old one). No WHEN: an update costs this trigger alone, as the rekey trigger
-- fires only for statements that set a key column (UPDATE OF, with the rowid's names where the key
-- is the rowid), so per-key ordering in the snapshot stays simple at no cost to other updates.
-- The key comparison is COLLATE BINARY: under a NOCASE key 'a' IS 'A', but the snapshot keys rows
-- by their stored bytes, so a change of case must be a delete of the old key and an insert of the new one.
DROP TRIGGER IF EXISTS {trg_update};
CREATE TRIGGER {trg_update} AFTER UPDATE ON {table}
BEGIN
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
    INSERT INTO _databus_txlog (tbl, op, row, ts, {key_slots})
    VALUES ({table_literal}, 'd', {key_marker}, {now_ms}, {old_key});
END;

-- A table with no UNIQUE constraint beside its key has no displace triggers (table_triggers_displace.sql):
-- a REPLACE conflict there only ever replaces the row of the key it writes.
DROP TRIGGER IF EXISTS {trg_displace};
DROP TRIGGER IF EXISTS {trg_displace_update};
