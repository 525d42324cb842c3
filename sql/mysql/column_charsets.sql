-- The character set of each character and ENUM/SET column of a table (validate refuses those capture cannot
-- decode).
SELECT COLUMN_NAME, CHARACTER_SET_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CHARACTER_SET_NAME IS NOT NULL
ORDER BY ORDINAL_POSITION
