-- The seed's simple poll query: a view's rows changed by transactions committed after :sinceScn.
-- The upper bound is absent in the seed's form, or bounds the commit SCN from above (a chunk's end).
SELECT /*+ first_rows LEADING(tx) */
    sync_core.getScn(tx.scn, tx.ora_rowscn) scn,
    tx.ts event_timestamp,
    src.*
FROM {view} src, sy$txlog tx
WHERE src.txn = tx.txn AND tx.scn > :sinceScn AND tx.ora_rowscn > :sinceScn{upper_bound}
