-- What identifies each configured table to capture besides its name: the relation's oid (a table dropped and
-- created again, swapped in by renames, or moved in from another schema has another); the oid of its row in the
-- publication (a table dropped from the publication and added again has another: the changes made while it was
-- out were never published; NULL where the table is published by FOR ALL TABLES or TABLES IN SCHEMA, with no row
-- of its own); and its storage: each leaf partition's (the table's own, unpartitioned) oid:relfilenode, which a
-- partition attached, detached, dropped or truncated, or a rewrite (ALTER ... TYPE ... USING, VACUUM FULL,
-- CLUSTER) changes, then the labels of its enum columns' types, which ALTER TYPE ... RENAME VALUE changes, then
-- each column's place (a digest of its name: its number), which a column dropped and added again under its name
-- changes. None of these sends a row event. NULL where the table does not exist. Reads only.
SELECT
    t.name,
    c.oid AS relation_oid,
    pr.oid AS membership_oid,
    CASE WHEN c.oid IS NOT NULL THEN CASE WHEN c.relkind = 'p' THEN coalesce((
        SELECT string_agg(pt.relid::oid::text || ':' || pc.relfilenode::text, ',' ORDER BY pt.relid::oid)
        FROM pg_partition_tree(c.oid) AS pt
        JOIN pg_class AS pc ON pc.oid = pt.relid
        WHERE pt.isleaf
    ), '') ELSE c.oid::text || ':' || c.relfilenode::text END || ';' || coalesce((
        SELECT md5(string_agg(a.attname || '=' || e.enumlabel, ',' ORDER BY a.attnum, e.enumsortorder))
        FROM pg_attribute AS a
        JOIN pg_type AS ty ON ty.oid = a.atttypid
        JOIN pg_enum AS e ON e.enumtypid = CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    ), '') || ';' || coalesce((
        SELECT string_agg(left(md5(a.attname), 12) || ':' || a.attnum::text, ',' ORDER BY a.attnum)
        FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    ), '') END AS storage
FROM unnest(%(tables)s::text []) WITH ORDINALITY AS t (name, ord)
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s
LEFT JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = t.name AND c.relkind IN ('r', 'p')
LEFT JOIN pg_publication AS p ON p.pubname = %(publication)s
LEFT JOIN pg_publication_rel AS pr ON pr.prpubid = p.oid AND pr.prrelid = c.oid
ORDER BY t.ord;
