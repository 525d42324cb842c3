-- The columns of one table as the catalog maps them, in the table's order: the declared type as
-- format_type writes it, the type's name and kind (a domain answers for its base type; an array for its
-- element type), whether the column is NOT NULL, its default expression, and whether it is generated
-- (pgoutput never sends a generated column, so capture leaves it out).
SELECT
    a.attname,
    CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
        ELSE format_type(a.atttypid, a.atttypmod) END AS declared,
    coalesce(bt.typname, t.typname) AS type_name,
    CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END AS typmod,
    coalesce(bt.typtype, t.typtype) = 'e' AS is_enum,
    et.typname AS element,
    coalesce(ebt.typtype, et.typtype) = 'e' AS element_is_enum,
    a.attnotnull AS not_null,
    pg_get_expr(d.adbin, d.adrelid) AS default_expr,
    a.attgenerated <> '' AS generated,
    coalesce(bt.oid, t.oid) AS type_oid
FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_type AS t ON t.oid = a.atttypid
LEFT JOIN pg_type AS bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
LEFT JOIN pg_type AS et
    ON et.oid = coalesce(bt.typelem, t.typelem) AND coalesce(bt.typcategory, t.typcategory) = 'A'
LEFT JOIN pg_type AS ebt ON et.typtype = 'd' AND ebt.oid = et.typbasetype
LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = %(schema)s AND c.relname = %(table)s AND c.relkind IN ('r', 'p')
    AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;
