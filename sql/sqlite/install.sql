-- Databus capture objects for SQLite (the port of sy$txlog / sync_core_settings).
-- Re-runnable without harm: every statement is IF NOT EXISTS, OR IGNORE or an upsert.
-- Rendered by dagster_databus.sources.sqlfiles; the epoch id and version are literals
-- produced by Python, never values from config. An install of capture version 2 is first
-- converted by migrate_v2.sql, in the same transaction.

-- Settings: the install's epoch (lineage id), the capture version, the prune watermark, and
-- checked_scn: every change at or below it was written by triggers that matched their table's columns.
CREATE TABLE IF NOT EXISTS _databus_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO _databus_settings (name, value) VALUES ('epoch_id', '{epoch_id}');
INSERT OR IGNORE INTO _databus_settings (name, value) VALUES ('pruned_through', '0');
INSERT OR IGNORE INTO _databus_settings (name, value) VALUES ('checked_scn', '0');
INSERT INTO _databus_settings (name, value) VALUES ('version', '{version}')
    ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- The transaction log, written by the capture triggers and nothing else on the application's
-- path: one plain row per change, so a write costs one more row (docs/performance.md).
-- scn is the rowid: SQLite gives each insert the largest rowid plus one, so SCNs increase in write
-- order, which is commit order because SQLite serializes writers. Pruning always keeps the newest
-- row, so the largest rowid, and with it the SCN, never goes back. op 'm' marks a row that changes
-- nothing: the SCN floor a migration keeps, or where install found a table's triggers missing.
CREATE TABLE IF NOT EXISTS _databus_txlog (
    scn INTEGER PRIMARY KEY,
    tbl TEXT    NOT NULL,
    op  TEXT    NOT NULL,  -- i, u, d; no CHECK: it cost a trigger a third of its time (capture checks)
    row TEXT    NOT NULL,
    ts  INTEGER NOT NULL
);

-- The row layouts of capture version 4: for each table and column list its triggers were rendered for,
-- the names and image kinds of the values its txlog rows hold in the value columns v0, v1, ... (added to
-- the txlog by install as wide as the widest table needs). A row's marker names its layout: '#<id>' for
-- the row, '#<id>k' for its key (render.py). Layouts are never deleted: a row may outlive its table's
-- triggers in the txlog until the poll has read it.
CREATE TABLE IF NOT EXISTS _databus_layouts (
    id   INTEGER PRIMARY KEY,
    tbl  TEXT NOT NULL,
    spec TEXT NOT NULL,  -- JSON: the columns as [name, kind] pairs and the key's column positions
    UNIQUE (tbl, spec)
);

-- Cuts: the newest SCN each poll saw while holding the write lock (cut.sql). No transaction is
-- open then, so the changes between two cuts are whole transactions: one window. The triggers
-- never read this table.
CREATE TABLE IF NOT EXISTS _databus_cuts (
    scn INTEGER PRIMARY KEY
);

-- The column list each table's triggers were rendered for, and the SCN ranges of changes that
-- triggers may have written after their table's columns changed (drift): the poll applies the
-- source's schema_changes policy to those instead of trusting their images.
CREATE TABLE IF NOT EXISTS _databus_shapes (
    tbl     TEXT PRIMARY KEY,
    columns TEXT NOT NULL  -- JSON [[name, declared type], ...] in column order
);
CREATE TABLE IF NOT EXISTS _databus_drift (
    tbl         TEXT    NOT NULL,
    after_scn   INTEGER NOT NULL,
    through_scn INTEGER NOT NULL,
    columns     TEXT    NOT NULL,  -- the table's columns when the drift was seen (JSON [[name, type], ...])
    reason      TEXT    NOT NULL CHECK (reason IN ('columns', 'triggers')),  -- triggers: they were missing
    PRIMARY KEY (tbl, after_scn)
);

-- The keys of the rows a REPLACE conflict may delete, recorded by a table's displace trigger before the row is
-- written and turned into deletes (or forgotten) by its AFTER trigger (table_triggers_displace.sql): at most one
-- row operation's worth per table. Install adds value columns v0, v1, ... as wide as the widest key.
CREATE TABLE IF NOT EXISTS _databus_displaced (
    tbl TEXT NOT NULL
);
-- Outside a statement every record there is a leftover (of an ignored row, or of a table renamed away with its
-- triggers): none may be read by a later statement's AFTER trigger.
DELETE FROM _databus_displaced;
