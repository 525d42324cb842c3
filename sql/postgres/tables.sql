-- The configured tables of one schema, one row each in the order given, as setup needs them: whether the
-- table exists, its replica identity (d default, n nothing, f full, i index) and whether that index
-- exists, its primary key, whether a column can be TOASTed (a varlena type not stored plain), and
-- whether this user owns it (ALTER TABLE and publishing need that) and may read it; for a partitioned
-- table, its partitions whose replica identity is not FULL (schema and name, in two arrays); for a table
-- others inherit from (INHERITS), how many do.
SELECT
    t.name,
    c.oid IS NOT NULL AS present,
    c.relreplident AS replica_identity,
    EXISTS (
        SELECT 1 FROM pg_index AS i WHERE i.indrelid = c.oid AND i.indisreplident
    ) AS identity_index,
    EXISTS (
        SELECT 1 FROM pg_index AS i WHERE i.indrelid = c.oid AND i.indisprimary
    ) AS has_primary_key,
    EXISTS (
        SELECT 1 FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            AND a.attlen = -1 AND a.attstorage <> 'p'
    ) AS toastable,
    coalesce(pg_has_role(c.relowner, 'USAGE'), false) AS owned,
    coalesce(has_table_privilege(c.oid, 'SELECT'), false) AS may_select,
    ARRAY(
        SELECT pn.nspname FROM pg_partition_tree(c.oid) AS pt
        JOIN pg_class AS pc ON pc.oid = pt.relid JOIN pg_namespace AS pn ON pn.oid = pc.relnamespace
        WHERE c.relkind = 'p' AND pt.relid <> c.oid AND pc.relreplident <> 'f' ORDER BY pn.nspname, pc.relname
    ) AS partition_schemas,
    ARRAY(
        SELECT pc.relname FROM pg_partition_tree(c.oid) AS pt
        JOIN pg_class AS pc ON pc.oid = pt.relid JOIN pg_namespace AS pn ON pn.oid = pc.relnamespace
        WHERE c.relkind = 'p' AND pt.relid <> c.oid AND pc.relreplident <> 'f' ORDER BY pn.nspname, pc.relname
    ) AS partition_names,
    (
        SELECT count(*) FROM pg_inherits AS i WHERE i.inhparent = c.oid AND c.relkind = 'r'
    ) AS inheritors
FROM unnest(%(tables)s::text []) WITH ORDINALITY AS t (name, ord)
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s
LEFT JOIN pg_class AS c
    ON c.relnamespace = n.oid AND c.relname = t.name AND c.relkind IN ('r', 'p')
ORDER BY t.ord;
