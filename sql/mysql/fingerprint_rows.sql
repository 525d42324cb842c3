-- The rows of some key-hash buckets of one table (read-only), for comparing them one by one
-- after the fingerprints of those buckets differed (see fingerprint.sql).
SELECT {columns}
FROM {table}
WHERE CRC32({key_text}) >> 20 IN ({buckets})
