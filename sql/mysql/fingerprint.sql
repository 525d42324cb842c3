-- Reconciliation fingerprint of one table (read-only, safe to re-run): per key-hash bucket, the
-- row count and the sum of row digests. A row's digest is the first 64 bits of the MD5 of its
-- canonical text; the bucket is the top 12 bits of the CRC-32 of its key's. The canonical text and
-- the same figures computed from Delta are defined in dagster_databus/core/fingerprint.py.
-- Run inside START TRANSACTION WITH CONSISTENT SNAPSHOT, so it sees the table at one position.
SELECT CRC32({key_text}) >> 20 AS bucket,
       COUNT(*) AS row_count,
       SUM(CAST(CONV(LEFT(MD5({row_text}), 16), 16, 10) AS UNSIGNED)) AS digest_sum
FROM {table}
GROUP BY bucket
