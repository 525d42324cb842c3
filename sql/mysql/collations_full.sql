-- MariaDB 10.10+: a shared collation's id for each character set it applies to (FULL_COLLATION_NAME).
SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY WHERE ID IS NOT NULL
