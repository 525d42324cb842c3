-- Capture triggers for one table (the port of Databus's per-table before insert/update
-- trigger, extended to deletes and key changes). Re-runnable: each trigger is dropped and
-- created again. Placeholders are quoted identifiers and column lists built by Python
-- from validated names.
--
-- The stale expression compares the table's live column list with the one rendered here, so rows written
-- after an ALTER TABLE and before the triggers are re-installed are flagged, not trusted.
--
-- Each trigger appends the row image as JSON. BLOB values are wrapped as a JSON object with one key "$b" holding hex, so a
-- blob in any column never makes the application's own write fail. REAL values are wrapped as an object with one key "$r" holding
-- printf('%!.20e'): SQLite's JSON writes reals with 15 significant digits, which changes values such as
-- 0.30000000000000004; twenty digits read back as the stored double exactly.

DROP TRIGGER IF EXISTS {trg_insert};
CREATE TRIGGER {trg_insert} AFTER INSERT ON {table}
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), {table_literal}, 'i',
            json_array({new_key}), json_object({new_row}), {now_ms}, {stale});
END;

DROP TRIGGER IF EXISTS {trg_update};
CREATE TRIGGER {trg_update} AFTER UPDATE ON {table} WHEN {key_unchanged}
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), {table_literal}, 'u',
            json_array({new_key}), json_object({new_row}), {now_ms}, {stale});
END;

-- An update that changes the key is a delete of the old key and an insert of the new one,
-- so per-key ordering in the snapshot stays simple.
DROP TRIGGER IF EXISTS {trg_rekey};
CREATE TRIGGER {trg_rekey} AFTER UPDATE ON {table} WHEN NOT ({key_unchanged})
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), {table_literal}, 'd',
            json_array({old_key}), json_object({old_row}), {now_ms}, {stale});
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), {table_literal}, 'i',
            json_array({new_key}), json_object({new_row}), {now_ms}, {stale});
END;

DROP TRIGGER IF EXISTS {trg_delete};
CREATE TRIGGER {trg_delete} AFTER DELETE ON {table}
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), {table_literal}, 'd',
            json_array({old_key}), json_object({old_row}), {now_ms}, {stale});
END;
