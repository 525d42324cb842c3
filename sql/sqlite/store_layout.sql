-- The layout a table's triggers are rendered for (render.layout_of), stored once: re-runnable.
INSERT OR IGNORE INTO _databus_layouts (tbl, spec) VALUES (:tbl, :spec);
