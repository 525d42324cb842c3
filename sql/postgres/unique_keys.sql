-- The column sets of a table's primary key and unique indexes (partial and expression indexes aside:
-- they do not make a column set unique across every row).
SELECT array_agg(a.attname ORDER BY a.attname) AS columns
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey)
WHERE n.nspname = %(schema)s AND c.relname = %(table)s AND i.indisunique AND i.indpred IS NULL
    AND i.indexprs IS NULL
GROUP BY i.indexrelid;
