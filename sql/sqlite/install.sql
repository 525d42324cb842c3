-- Databus capture objects for SQLite (the port of sy$txlog / sync_core_settings).
-- Re-runnable without harm: every statement is IF NOT EXISTS, OR IGNORE or an upsert.
-- Rendered by dagster_databus.sources.sqlfiles; the epoch id and version are literals
-- produced by Python, never values from config.

-- Settings: the install's epoch (lineage id), the capture version, the prune watermark.
CREATE TABLE IF NOT EXISTS _databus_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO _databus_settings (name, value) VALUES ('epoch_id', '{epoch_id}');
INSERT OR IGNORE INTO _databus_settings (name, value) VALUES ('pruned_through', '0');
INSERT INTO _databus_settings (name, value) VALUES ('version', '{version}')
    ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- The epoch counter. Triggers stamp each txlog row with the current value; the poller
-- bumps it in its own short write transaction, which cuts the stream between whole
-- transactions because SQLite serializes writers.
CREATE TABLE IF NOT EXISTS _databus_epoch (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
);
INSERT OR IGNORE INTO _databus_epoch (id, epoch) VALUES (1, 1);

-- The transaction log. AUTOINCREMENT makes scn strictly increasing in write order (and
-- so in commit order) and never reused, even after rows are pruned.
CREATE TABLE IF NOT EXISTS _databus_txlog (
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
