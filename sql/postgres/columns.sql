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
    CASE
        -- A column added with a constant default: the value every row then present holds (PostgreSQL keeps it
        -- as the column's "missing value", whatever default was set after), as core.defaults reads a literal.
        WHEN a.atthasmissing THEN (
            SELECT CASE coalesce(bt.typcategory, t.typcategory)
                WHEN 'N' THEN m.v
                WHEN 'B' THEN CASE m.v WHEN 't' THEN 'TRUE' ELSE 'FALSE' END
                ELSE quote_literal(m.v)
            END
            FROM (SELECT (a.attmissingval::text::text [])[1] AS v) AS m
        )
        -- Otherwise rows present when the column was added hold NULL (added without a default) or values of an
        -- expression: a default now is no constant they hold, so it is given as an expression.
        WHEN d.adbin IS NOT NULL THEN '(' || pg_get_expr(d.adbin, d.adrelid) || ')'
    END AS default_expr,
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
