-- Capture triggers for one table (the port of Databus's per-table before insert/update trigger,
-- extended to deletes and key changes). Re-runnable: each trigger is dropped and created again.
-- Placeholders are quoted identifiers and column lists built by Python from validated names.
--
-- Each trigger appends one txlog row with the row image as JSON (a delete: the key's columns only,
-- as Databus's delete shadow tables hold them) and nothing else: no read of
-- another table, no per-row check (a changed column list is found by the poll and by install,
-- which compare the table with _databus_shapes). Values go into the image as they are, except
-- where the column's affinity lets SQLite store something JSON would change or refuse: a BLOB
-- becomes an object with one key "$b" holding hex (so a blob in any column never makes the
-- application's own write fail), and a REAL an object with one key "$r" holding printf('%!.20e'),
-- since SQLite's JSON writes reals with 15 significant digits and changes values such as
-- 0.30000000000000004; twenty digits read back as the stored double exactly.

DROP TRIGGER IF EXISTS {trg_insert};
CREATE TRIGGER {trg_insert} AFTER INSERT ON {table}
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts) VALUES ({table_literal}, 'i', json_object({new_row}), {now_ms});
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
    INSERT INTO _databus_txlog (tbl, op, row, ts)
    VALUES ({table_literal}, CASE WHEN {key_unchanged} THEN 'u' ELSE 'i' END, json_object({new_row}), {now_ms});
END;

DROP TRIGGER IF EXISTS {trg_rekey};
CREATE TRIGGER {trg_rekey} AFTER UPDATE OF {key_names} ON {table} WHEN NOT ({key_unchanged})
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts) VALUES ({table_literal}, 'd', json_object({old_key}), {now_ms});
END;

DROP TRIGGER IF EXISTS {trg_delete};
CREATE TRIGGER {trg_delete} AFTER DELETE ON {table}
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts) VALUES ({table_literal}, 'd', json_object({old_key}), {now_ms});
END;
