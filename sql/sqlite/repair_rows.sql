-- After a table's columns changed, the changes its old triggers wrote in (:after_scn, :through_scn] may
-- lack the new columns. Install, holding the write lock right after it rendered the new triggers, writes
-- each key those changes touched as the table holds it now: an update in the new shape, or a delete of
-- a key that is gone. Placeholders are quoted identifiers and expressions Python built from validated
-- names; {image} reads the row through the alias cur.
INSERT INTO _databus_txlog (tbl, op, row, ts)
SELECT {table_literal}, 'u', {image}, {now_ms}
FROM {table} AS cur
WHERE ({key}) IN (SELECT {extracted} FROM _databus_images
                  WHERE tbl = {table_literal} AND op != 'm' AND scn > :after_scn AND scn <= :through_scn);

INSERT INTO _databus_txlog (tbl, op, row, ts)
SELECT {table_literal}, 'd', max(t.row), {now_ms}
FROM _databus_images AS t
WHERE t.tbl = {table_literal} AND t.op != 'm' AND t.scn > :after_scn AND t.scn <= :through_scn
  AND NOT EXISTS (SELECT 1 FROM {table} AS cur WHERE ({key}) = ({extracted_t}))
GROUP BY {extracted_t};
