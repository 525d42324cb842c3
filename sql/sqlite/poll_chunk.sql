-- Changes since :since_scn in closed epochs, in commit order, at most :chunk_rows rows.
-- The caller completes the last epoch with poll_epoch_rest.sql so no window is split.
SELECT scn, epoch, tbl, op, pk, row, ts, stale
FROM _databus_txlog
WHERE scn > :since_scn AND epoch <= :closed_epoch
ORDER BY scn
LIMIT :chunk_rows;
