-- A row of {table} holding text that is not valid UTF-8 in one of the columns read as text (validate, and
-- the bootstrap once the sqlite3 module failed to decode one): its key (text keys as their bytes, so the
-- row can be fetched at all) and those columns' text as bytes (NULL where a value is not text: a BLOB may
-- hold any bytes). {invalid} tests each column: stored as text, with a byte beyond ASCII (GLOB :non_ascii,
-- in C), and refused by databus_bad_utf8 (a Python function the caller registers on the connection), so
-- only non-ASCII text costs a Python call. Placeholders are quoted identifiers and expressions Python built
-- from validated names. Reads only; one scan of the table at most.
SELECT {key}, {values}
FROM {table}
WHERE {invalid}
LIMIT 1;
