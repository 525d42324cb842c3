-- The rest of one window, after :after_scn through its cut :window_scn, in the columns of
-- poll_chunk.sql: completes a window a chunk boundary fell inside.
SELECT count(*) AS n, group_concat(scn) AS scns, group_concat(tbl) AS tbls,
       group_concat(op, '') AS ops, CAST(group_concat(row, char(10)) AS BLOB) AS images, group_concat(ts) AS ts
FROM (SELECT scn, tbl, op, row, ts
      FROM _databus_images
      WHERE scn > :after_scn AND scn <= :window_scn
      ORDER BY scn);
