-- One more value column of the txlog, for a table wider than any before. No type: SQLite keeps each value
-- as stored (no affinity), and adding a column rewrites no row. {column} is v<n>, built by Python.
ALTER TABLE _databus_txlog ADD COLUMN {column};
