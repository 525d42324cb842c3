-- Columns given by name, type oid and modifier (a table's live columns: table_columns.sql; or as a relation
-- message describes them), in that order, as the catalog maps them: the declared type (a domain answers for
-- its base type; an array for its element type), whether it is an enum, and what only the table knows (NOT
-- NULL, the default) from its column of that name now, where it still has one. A type dropped since a relation
-- message described it (a capture lagging behind a migration) gives a row with a NULL declared type: the
-- stream decodes that column as the change log last recorded it.
SELECT
    r.name AS attname,
    CASE WHEN t.oid IS NULL THEN NULL
        WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
        ELSE format_type(r.type_oid, r.typmod) END AS declared,
    coalesce(bt.typname, t.typname) AS type_name,
    CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE r.typmod END AS typmod,
    coalesce(bt.typtype, t.typtype) = 'e' AS is_enum,
    et.typname AS element,
    coalesce(ebt.typtype, et.typtype) = 'e' AS element_is_enum,
    coalesce(a.attnotnull, false) AS not_null,
    CASE
        -- An identity column: the rows present when it was added were given a sequence's values, no constant.
        WHEN a.attidentity IN ('a', 'd') THEN '(GENERATED ' || CASE a.attidentity WHEN 'a' THEN 'ALWAYS'
            ELSE 'BY DEFAULT' END || ' AS IDENTITY)'
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
    coalesce(bt.oid, t.oid) AS type_oid
FROM unnest(%(names)s::text [], %(types)s::oid [], %(typmods)s::int []) WITH ORDINALITY
    AS r (name, type_oid, typmod, ord)
LEFT JOIN pg_type AS t ON t.oid = r.type_oid
LEFT JOIN pg_type AS bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
LEFT JOIN pg_type AS et
    ON et.oid = coalesce(bt.typelem, t.typelem) AND coalesce(bt.typcategory, t.typcategory) = 'A'
LEFT JOIN pg_type AS ebt ON et.typtype = 'd' AND ebt.oid = et.typbasetype
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s
LEFT JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = %(table)s
LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attname = r.name AND NOT a.attisdropped
LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
ORDER BY r.ord;
