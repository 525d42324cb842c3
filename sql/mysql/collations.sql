-- Every collation id the server defines and its character set: MySQL's and MariaDB's collations, and
-- MariaDB 10.10+'s per-character-set ids of its shared collations (utf8mb4_uca1400_ai_ci is 2304), which
-- only COLLATION_CHARACTER_SET_APPLICABILITY lists (the query of collations_full.sql adds them).
SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL
