-- Per captured table: the txn column the trigger fills (seed 000, "changes to the source").
-- The installer skips it when the column exists.
ALTER TABLE {table} ADD (txn NUMBER);
