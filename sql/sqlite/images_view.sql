-- Every txlog row with its row image as JSON, what the poll, validate and drift repairs read: a version 4
-- row's image made from its value columns by its layout's marker (the CASE branches, rendered by Python from
-- _databus_layouts: quoted literals of validated column names), any other row's (version 3's JSON images,
-- markers, repairs) as it is. Re-runnable: install creates it again whenever a layout was added.
DROP VIEW IF EXISTS _databus_images;
CREATE VIEW _databus_images AS
SELECT scn, tbl, op, {image} AS row, ts
FROM _databus_txlog;
