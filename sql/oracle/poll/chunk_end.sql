-- Where a chunk of :rowsPerChunk transactions after :sinceScn ends (bounded by :untilScn, the
-- database SCN taken when the poll started). The per-table queries then read every
-- transaction with a commit SCN in (sinceScn, chunk end]: whole transactions, all tables.
SELECT MAX(scn) AS chunk_end, COUNT(*) AS transactions
FROM (SELECT sync_core.getScn(tx.scn, tx.ora_rowscn) scn
      FROM sy$txlog tx
      WHERE tx.scn > :sinceScn AND tx.ora_rowscn > :sinceScn AND BITAND(tx.mask, :sourceMask) > 0
        AND sync_core.getScn(tx.scn, tx.ora_rowscn) <= :untilScn
      ORDER BY 1
      FETCH FIRST :rowsPerChunk ROWS ONLY)
