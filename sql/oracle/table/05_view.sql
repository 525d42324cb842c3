-- The seed's sy$<table> view: the table's columns with txn, for the poll query.
CREATE OR REPLACE FORCE VIEW {view} AS SELECT txn, {columns} FROM {table};
