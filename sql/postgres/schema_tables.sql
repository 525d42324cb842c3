-- The tables and partitioned tables of one schema: what an error for a missing table lists.
SELECT c.relname
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p')
ORDER BY 1;
