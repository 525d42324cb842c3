-- One more value column of the txlog (or of _databus_displaced), for a table (key) wider than any before. No type: SQLite keeps each value
-- as stored (no affinity), and adding a column rewrites no row. {column} is v<n>, built by Python.
ALTER TABLE {table} ADD COLUMN {column};
