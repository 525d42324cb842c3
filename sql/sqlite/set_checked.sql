-- Every change at or below :scn has been compared with its table's columns (drift, if any, recorded).
-- Re-runnable; never moves back.
UPDATE _databus_settings SET value = CAST(MAX(CAST(value AS INTEGER), :scn) AS TEXT) WHERE name = 'checked_scn';
