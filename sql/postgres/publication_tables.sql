-- The tables a publication names, and whether it limits what it publishes of one (always false
-- before PostgreSQL 15, which added row filters and column lists: publication_tables_15.sql).
SELECT
    n.nspname AS schema_name,
    c.relname AS table_name,
    false AS limited
FROM pg_publication_rel AS pr
INNER JOIN pg_class AS c ON c.oid = pr.prrelid
INNER JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE pr.prpubid = %(publication_oid)s;
