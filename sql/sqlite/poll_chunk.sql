-- Changes since :since_scn up to this poll's cut :cut_scn, in commit order, at most :chunk_rows of
-- them, as one row of columns: each column's values joined in SCN order (row images by newlines,
-- which SQLite's JSON escapes inside values), so capture converts a chunk by column with no Python
-- object per change. SQLite does not flatten an ORDER BY subquery into an aggregate, so the joins
-- follow its order; capture checks that the SCNs come out ascending all the same. The images come as a
-- BLOB: capture decodes them itself, so an image holding text that is not UTF-8 is refused by table, column
-- and key instead of failing the sqlite3 module's decoding of the whole chunk.
-- The caller completes the last window (up to the next cut) with poll_window_rest.sql, so no window is split.
SELECT count(*) AS n, group_concat(scn) AS scns, group_concat(tbl) AS tbls,
       group_concat(op, '') AS ops, CAST(group_concat(row, char(10)) AS BLOB) AS images, group_concat(ts) AS ts
FROM (SELECT scn, tbl, op, row, ts
      FROM _databus_images
      WHERE scn > :since_scn AND scn <= :cut_scn
      ORDER BY scn
      LIMIT :chunk_rows);
