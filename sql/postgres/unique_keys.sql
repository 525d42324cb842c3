-- The columns of a table's primary key and unique indexes, by index (partial and expression indexes aside:
-- they do not make a column set unique across every row).
SELECT i.indexrelid, a.attname
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey)
WHERE n.nspname = %(schema)s AND c.relname = %(table_name)s AND i.indisunique AND i.indpred IS NULL
    AND i.indexprs IS NULL;
