-- Changes since :since_scn in closed epochs, in commit order, at most :chunk_rows of them, as one
-- row of columns: each column's values joined in SCN order (row images by newlines, which SQLite's
-- JSON escapes inside values), so capture converts a chunk by column with no Python object per
-- change. SQLite does not flatten an ORDER BY subquery into an aggregate, so the joins follow its
-- order; capture checks that the SCNs come out ascending all the same.
-- The caller completes the last epoch with poll_epoch_rest.sql so no window is split.
SELECT count(*) AS n, group_concat(scn) AS scns, group_concat(epoch) AS epochs, group_concat(tbl) AS tbls,
       group_concat(op, '') AS ops, group_concat(row, char(10)) AS images, group_concat(ts) AS ts,
       max(stale) AS stale
FROM (SELECT scn, epoch, tbl, op, row, ts, stale
      FROM _databus_txlog
      WHERE scn > :since_scn AND epoch <= :closed_epoch
      ORDER BY scn
      LIMIT :chunk_rows);
