-- Whether the server lists collation ids per character set (MariaDB 10.10+); MySQL's table has no ID column.
SELECT COUNT(*) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = 'information_schema' AND TABLE_NAME = 'COLLATION_CHARACTER_SET_APPLICABILITY'
  AND COLUMN_NAME = 'ID'
