-- The rest of one epoch after :after_scn: completes a window a chunk boundary fell inside.
SELECT scn, epoch, tbl, op, pk, row, ts, stale
FROM _databus_txlog
WHERE epoch = :epoch AND scn > :after_scn
ORDER BY scn;
