-- A table's live columns in its order, by name, type oid and modifier: what described_columns.sql maps.
-- Generated columns are left out: pgoutput never sends them (before PostgreSQL 18).
SELECT
    array_agg(a.attname::text ORDER BY a.attnum) AS names,
    array_agg(a.atttypid ORDER BY a.attnum) AS types,
    array_agg(a.atttypmod ORDER BY a.attnum) AS typmods
FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = %(table)s AND c.relkind IN ('r', 'p')
    AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
