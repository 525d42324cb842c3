-- The collations of single-byte character sets (binary aside): each is decoded by a table of its own, which
-- the server converts (charset_table.sql), since a collation may map bytes differently than its character
-- set's default one (latin2_czech_cs leaves 0x7F-0x9F unmapped).
SELECT co.ID, co.COLLATION_NAME, co.CHARACTER_SET_NAME
FROM information_schema.COLLATIONS co
JOIN information_schema.CHARACTER_SETS cs ON cs.CHARACTER_SET_NAME = co.CHARACTER_SET_NAME
WHERE cs.MAXLEN = 1 AND co.ID IS NOT NULL AND co.CHARACTER_SET_NAME <> 'binary'
