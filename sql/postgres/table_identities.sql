-- What identifies each configured table to capture besides its name: the relation's oid (a table dropped and
-- created again, swapped in by renames, or moved in from another schema has another) and the oid of its row in
-- the publication (a table dropped from the publication and added again has another: the changes made while it
-- was out were never published; NULL where the table is published by FOR ALL TABLES or TABLES IN SCHEMA, with
-- no row of its own); for a partitioned table, its leaf partitions as oid:relfilenode (one attached, detached or
-- dropped changes the list; one truncated or rewritten, its relfilenode). NULL where the table does not exist.
-- Reads only.
SELECT
    t.name,
    c.oid AS relation_oid,
    pr.oid AS membership_oid,
    CASE WHEN c.relkind = 'p' THEN coalesce((
        SELECT string_agg(pt.relid::oid::text || ':' || pc.relfilenode::text, ',' ORDER BY pt.relid::oid)
        FROM pg_partition_tree(c.oid) AS pt
        JOIN pg_class AS pc ON pc.oid = pt.relid
        WHERE pt.isleaf
    ), '') END AS partitions
FROM unnest(%(tables)s::text []) WITH ORDINALITY AS t (name, ord)
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s
LEFT JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = t.name AND c.relkind IN ('r', 'p')
LEFT JOIN pg_publication AS p ON p.pubname = %(publication)s
LEFT JOIN pg_publication_rel AS pr ON pr.prpubid = p.oid AND pr.prrelid = c.oid
ORDER BY t.ord;
