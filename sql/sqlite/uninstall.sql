-- Removes the capture core objects. Run after every table's uninstall_table.sql. Re-runnable.
DROP VIEW IF EXISTS _databus_images;
DROP TABLE IF EXISTS _databus_txlog;
DROP TABLE IF EXISTS _databus_layouts;
DROP TABLE IF EXISTS _databus_cuts;
DROP TABLE IF EXISTS _databus_shapes;
DROP TABLE IF EXISTS _databus_drift;
DROP TABLE IF EXISTS _databus_displaced;
DROP TABLE IF EXISTS _databus_epoch;
DROP TABLE IF EXISTS _databus_settings;
