-- The unlogged relations of a table, schema and name: the table itself, or its partitions (a partitioned
-- table's changes are its partitions'). Logical decoding never sees an unlogged table's changes.
SELECT rn.nspname AS schema_name, r.relname AS table_name
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_class AS r ON r.oid = c.oid OR r.oid IN (SELECT pt.relid FROM pg_partition_tree(c.oid) AS pt)
JOIN pg_namespace AS rn ON rn.oid = r.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = %(table)s AND c.relkind IN ('r', 'p') AND r.relpersistence = 'u'
ORDER BY rn.nspname, r.relname;
