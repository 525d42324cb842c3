-- Capture objects as dagster-databus capture version 2 installed them for
--   CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER)
-- (dumped from sqlite_master): what tests/test_sqlite_capture.py upgrades to the current version.

CREATE TABLE _databus_epoch (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
);

CREATE TABLE _databus_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE _databus_txlog (
    scn   INTEGER PRIMARY KEY AUTOINCREMENT,
    epoch INTEGER NOT NULL,
    tbl   TEXT    NOT NULL,
    op    TEXT    NOT NULL CHECK (op IN ('i', 'u', 'd')),
    pk    TEXT    NOT NULL,
    row   TEXT    NOT NULL,
    ts    INTEGER NOT NULL,
    -- 1 when the table's columns differed from those the trigger was rendered for: the row
    -- image may lack columns, so the poller refuses it (SchemaDriftError) instead of guessing.
    stale INTEGER NOT NULL DEFAULT 0
);

INSERT INTO _databus_settings (name, value) VALUES ('epoch_id', '0123456789abcdef0123456789abcdef');
INSERT INTO _databus_settings (name, value) VALUES ('pruned_through', '0');
INSERT INTO _databus_settings (name, value) VALUES ('version', '2');
INSERT INTO _databus_epoch (id, epoch) VALUES (1, 1);

CREATE TRIGGER "_databus_items_delete" AFTER DELETE ON "items"
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), 'items', 'd',
            json_array(OLD."id"), json_object('id', CASE typeof(OLD."id") WHEN 'blob' THEN json_object('$b', hex(OLD."id")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."id")) ELSE OLD."id" END, 'name', CASE typeof(OLD."name") WHEN 'blob' THEN json_object('$b', hex(OLD."name")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."name")) ELSE OLD."name" END, 'price', CASE typeof(OLD."price") WHEN 'blob' THEN json_object('$b', hex(OLD."price")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."price")) ELSE OLD."price" END, 'qty', CASE typeof(OLD."qty") WHEN 'blob' THEN json_object('$b', hex(OLD."qty")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."qty")) ELSE OLD."qty" END), CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER), CASE WHEN (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info('items') ORDER BY cid)) = 'id,name,price,qty' THEN 0 ELSE 1 END);
END;

CREATE TRIGGER "_databus_items_insert" AFTER INSERT ON "items"
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), 'items', 'i',
            json_array(NEW."id"), json_object('id', CASE typeof(NEW."id") WHEN 'blob' THEN json_object('$b', hex(NEW."id")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."id")) ELSE NEW."id" END, 'name', CASE typeof(NEW."name") WHEN 'blob' THEN json_object('$b', hex(NEW."name")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."name")) ELSE NEW."name" END, 'price', CASE typeof(NEW."price") WHEN 'blob' THEN json_object('$b', hex(NEW."price")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."price")) ELSE NEW."price" END, 'qty', CASE typeof(NEW."qty") WHEN 'blob' THEN json_object('$b', hex(NEW."qty")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."qty")) ELSE NEW."qty" END), CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER), CASE WHEN (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info('items') ORDER BY cid)) = 'id,name,price,qty' THEN 0 ELSE 1 END);
END;

CREATE TRIGGER "_databus_items_rekey" AFTER UPDATE ON "items" WHEN NOT (OLD."id" IS NEW."id")
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), 'items', 'd',
            json_array(OLD."id"), json_object('id', CASE typeof(OLD."id") WHEN 'blob' THEN json_object('$b', hex(OLD."id")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."id")) ELSE OLD."id" END, 'name', CASE typeof(OLD."name") WHEN 'blob' THEN json_object('$b', hex(OLD."name")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."name")) ELSE OLD."name" END, 'price', CASE typeof(OLD."price") WHEN 'blob' THEN json_object('$b', hex(OLD."price")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."price")) ELSE OLD."price" END, 'qty', CASE typeof(OLD."qty") WHEN 'blob' THEN json_object('$b', hex(OLD."qty")) WHEN 'real' THEN json_object('$r', printf('%!.20e', OLD."qty")) ELSE OLD."qty" END), CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER), CASE WHEN (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info('items') ORDER BY cid)) = 'id,name,price,qty' THEN 0 ELSE 1 END);
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), 'items', 'i',
            json_array(NEW."id"), json_object('id', CASE typeof(NEW."id") WHEN 'blob' THEN json_object('$b', hex(NEW."id")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."id")) ELSE NEW."id" END, 'name', CASE typeof(NEW."name") WHEN 'blob' THEN json_object('$b', hex(NEW."name")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."name")) ELSE NEW."name" END, 'price', CASE typeof(NEW."price") WHEN 'blob' THEN json_object('$b', hex(NEW."price")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."price")) ELSE NEW."price" END, 'qty', CASE typeof(NEW."qty") WHEN 'blob' THEN json_object('$b', hex(NEW."qty")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."qty")) ELSE NEW."qty" END), CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER), CASE WHEN (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info('items') ORDER BY cid)) = 'id,name,price,qty' THEN 0 ELSE 1 END);
END;

CREATE TRIGGER "_databus_items_update" AFTER UPDATE ON "items" WHEN OLD."id" IS NEW."id"
BEGIN
    INSERT INTO _databus_txlog (epoch, tbl, op, pk, row, ts, stale)
    VALUES ((SELECT epoch FROM _databus_epoch WHERE id = 1), 'items', 'u',
            json_array(NEW."id"), json_object('id', CASE typeof(NEW."id") WHEN 'blob' THEN json_object('$b', hex(NEW."id")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."id")) ELSE NEW."id" END, 'name', CASE typeof(NEW."name") WHEN 'blob' THEN json_object('$b', hex(NEW."name")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."name")) ELSE NEW."name" END, 'price', CASE typeof(NEW."price") WHEN 'blob' THEN json_object('$b', hex(NEW."price")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."price")) ELSE NEW."price" END, 'qty', CASE typeof(NEW."qty") WHEN 'blob' THEN json_object('$b', hex(NEW."qty")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."qty")) ELSE NEW."qty" END), CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER), CASE WHEN (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info('items') ORDER BY cid)) = 'id,name,price,qty' THEN 0 ELSE 1 END);
END;
