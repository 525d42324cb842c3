-- Deletes (beyond the seed, whose triggers see inserts and updates only): the key of each
-- deleted row, or of the old key of a key-changing update, with the deleting transaction's txn.
-- CTAS copies the key columns' types. Skipped when the table exists.
CREATE TABLE {shadow} AS SELECT {key_columns}, CAST(NULL AS NUMBER) AS txn FROM {table} WHERE 1 = 0;

CREATE INDEX {shadow_index} ON {shadow} (txn);
