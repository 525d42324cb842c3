-- publication_tables.sql for PostgreSQL 15 and later: a table published with a row filter (WHERE) or a
-- column list is limited (capture would miss rows or columns), and a schema published whole
-- (FOR TABLES IN SCHEMA) is a row without a table name.
SELECT
    n.nspname AS schema_name,
    c.relname AS table_name,
    (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL) AS limited
FROM pg_publication_rel AS pr
INNER JOIN pg_class AS c ON c.oid = pr.prrelid
INNER JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE pr.prpubid = %(publication_oid)s
UNION ALL
SELECT
    n.nspname AS schema_name,
    NULL AS table_name,
    false AS limited
FROM pg_publication_namespace AS pn
INNER JOIN pg_namespace AS n ON n.oid = pn.pnnspid
WHERE pn.pnpubid = %(publication_oid)s;
