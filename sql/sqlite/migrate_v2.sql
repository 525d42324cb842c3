-- Capture objects of version 2 kept an AUTOINCREMENT txlog whose rows carried an epoch, their key
-- and a per-row staleness flag. Install converts them inside its write transaction, only when the
-- txlog still has its epoch column: this sets the old txlog aside, install.sql creates the new
-- objects, and migrate_v2_rows.sql moves every change over, keeping its SCN.
ALTER TABLE _databus_txlog RENAME TO _databus_txlog_v2;
