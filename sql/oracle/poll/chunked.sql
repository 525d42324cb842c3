-- The seed's chunked poll query: at most :rowsPerChunk transactions of the source after
-- :sinceScn, in SCN order, joined with a view's rows.
SELECT t.scn, t.event_timestamp, src.*
FROM {view} src,
     (SELECT /*+ first_rows LEADING(tx) */
             sync_core.getScn(tx.scn, tx.ora_rowscn) scn,
             tx.ts event_timestamp,
             tx.txn,
             ROW_NUMBER() OVER (ORDER BY sync_core.getScn(tx.scn, tx.ora_rowscn)) r
      FROM sy$txlog tx
      WHERE tx.scn > :sinceScn AND tx.ora_rowscn > :sinceScn AND BITAND(tx.mask, :sourceMask) > 0) t
WHERE src.txn = t.txn AND t.r <= :rowsPerChunk
ORDER BY t.r
