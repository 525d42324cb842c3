-- The column list a table's triggers were just rendered for. Re-runnable.
INSERT INTO _databus_shapes (tbl, columns) VALUES (:tbl, :columns)
    ON CONFLICT (tbl) DO UPDATE SET columns = excluded.columns;
