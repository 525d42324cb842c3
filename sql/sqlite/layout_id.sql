-- The id of a table's stored layout, if it was stored.
SELECT id FROM _databus_layouts WHERE tbl = :tbl AND spec = :spec;
