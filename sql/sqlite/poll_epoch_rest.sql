-- The rest of one epoch after :after_scn, in the columns of poll_chunk.sql: completes a window a
-- chunk boundary fell inside.
SELECT count(*) AS n, group_concat(scn) AS scns, group_concat(epoch) AS epochs, group_concat(tbl) AS tbls,
       group_concat(op, '') AS ops, group_concat(row, char(10)) AS images, group_concat(ts) AS ts,
       max(stale) AS stale
FROM (SELECT scn, epoch, tbl, op, row, ts, stale
      FROM _databus_txlog
      WHERE epoch = :epoch AND scn > :after_scn
      ORDER BY scn);
