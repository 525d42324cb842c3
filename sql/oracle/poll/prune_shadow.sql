-- Drops a table's delete-shadow rows whose transactions the change log durably holds.
DELETE FROM {shadow} d WHERE d.txn IN (SELECT tx.txn FROM sy$txlog tx WHERE tx.scn <= :throughScn)
