-- The changes in a drift range could not be repaired (install could not match their keys): the marker
-- at the range's end says so, so the table's schema_changes policy reads the table again.
UPDATE _databus_txlog
SET row = json_set(row, '$.statement', json_extract(row, '$.statement') || ' (stale changes not repaired)')
WHERE scn = (SELECT through_scn FROM _databus_drift WHERE tbl = :tbl AND after_scn = :after_scn)
  AND op = 'm';
