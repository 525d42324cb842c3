-- Index on txn for the poll's join with sy$txlog. Skipped when it exists.
CREATE INDEX {txn_index} ON {table} (txn);
