-- Capture objects as dagster-databus capture version 3 installed them for
--   CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, data BLOB)
-- (dumped from sqlite_master, settings and shapes rows included): what tests/test_sqlite_capture.py
-- upgrades to the current version, with changes version 3 wrote and no capture read yet.

CREATE TABLE _databus_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE _databus_txlog (
    scn INTEGER PRIMARY KEY,
    tbl TEXT    NOT NULL,
    op  TEXT    NOT NULL,  -- i, u, d; no CHECK: it cost a trigger a third of its time (capture checks)
    row TEXT    NOT NULL,
    ts  INTEGER NOT NULL
);

CREATE TABLE _databus_cuts (
    scn INTEGER PRIMARY KEY
);

CREATE TABLE _databus_shapes (
    tbl     TEXT PRIMARY KEY,
    columns TEXT NOT NULL  -- JSON [[name, declared type], ...] in column order
);

CREATE TABLE _databus_drift (
    tbl         TEXT    NOT NULL,
    after_scn   INTEGER NOT NULL,
    through_scn INTEGER NOT NULL,
    columns     TEXT    NOT NULL,  -- the table's columns when the drift was seen (JSON [[name, type], ...])
    reason      TEXT    NOT NULL CHECK (reason IN ('columns', 'triggers')),  -- triggers: they were missing
    PRIMARY KEY (tbl, after_scn)
);

CREATE TRIGGER "_databus_items_insert" AFTER INSERT ON "items"
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts) VALUES ('items', 'i', json_object('id', NEW."id", 'name', CASE typeof(NEW."name") WHEN 'blob' THEN json_object('$b', hex(NEW."name")) ELSE NEW."name" END, 'price', CASE typeof(NEW."price") WHEN 'blob' THEN json_object('$b', hex(NEW."price")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."price")) ELSE NEW."price" END, 'qty', CASE typeof(NEW."qty") WHEN 'blob' THEN json_object('$b', hex(NEW."qty")) ELSE NEW."qty" END, 'data', CASE typeof(NEW."data") WHEN 'blob' THEN json_object('$b', hex(NEW."data")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."data")) ELSE NEW."data" END), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
END;

CREATE TRIGGER "_databus_items_update" AFTER UPDATE ON "items"
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts)
    VALUES ('items', CASE WHEN OLD."id" IS NEW."id" COLLATE BINARY THEN 'u' ELSE 'i' END, json_object('id', NEW."id", 'name', CASE typeof(NEW."name") WHEN 'blob' THEN json_object('$b', hex(NEW."name")) ELSE NEW."name" END, 'price', CASE typeof(NEW."price") WHEN 'blob' THEN json_object('$b', hex(NEW."price")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."price")) ELSE NEW."price" END, 'qty', CASE typeof(NEW."qty") WHEN 'blob' THEN json_object('$b', hex(NEW."qty")) ELSE NEW."qty" END, 'data', CASE typeof(NEW."data") WHEN 'blob' THEN json_object('$b', hex(NEW."data")) WHEN 'real' THEN json_object('$r', printf('%!.20e', NEW."data")) ELSE NEW."data" END), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
END;

CREATE TRIGGER "_databus_items_rekey" AFTER UPDATE OF "id", rowid, _rowid_, oid ON "items" WHEN NOT (OLD."id" IS NEW."id" COLLATE BINARY)
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts) VALUES ('items', 'd', json_object('id', OLD."id"), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
END;

CREATE TRIGGER "_databus_items_delete" AFTER DELETE ON "items"
BEGIN
    INSERT INTO _databus_txlog (tbl, op, row, ts) VALUES ('items', 'd', json_object('id', OLD."id"), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
END;

INSERT INTO _databus_settings (name, value) VALUES ('checked_scn', '0');
INSERT INTO _databus_settings (name, value) VALUES ('epoch_id', '2b1c5b4692e342c2b4905b041c894cd4');
INSERT INTO _databus_settings (name, value) VALUES ('owner_source', 'shop');
INSERT INTO _databus_settings (name, value) VALUES ('pruned_through', '0');
INSERT INTO _databus_settings (name, value) VALUES ('version', '3');
INSERT INTO _databus_shapes (tbl, columns) VALUES ('items', '[["id", "INTEGER", 0, null], ["name", "TEXT", 0, null], ["price", "REAL", 0, null], ["qty", "INTEGER", 0, null], ["data", "BLOB", 0, null]]');
