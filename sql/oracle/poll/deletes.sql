-- Deleted keys (and old keys of key-changing updates) of one table, committed in (sinceScn, untilScn].
SELECT sync_core.getScn(tx.scn, tx.ora_rowscn) scn, tx.ts event_timestamp, d.*
FROM {shadow} d, sy$txlog tx
WHERE d.txn = tx.txn AND tx.scn > :sinceScn AND tx.ora_rowscn > :sinceScn
  AND sync_core.getScn(tx.scn, tx.ora_rowscn) <= :untilScn
