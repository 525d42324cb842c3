-- The publication of the configured tables, publishing every kind of change. The names in braces are
-- filled by psycopg2.sql (identifiers quoted by it; the options are setup's fixed list). Run only when
-- publication.sql finds none (CREATE PUBLICATION has no IF NOT EXISTS).
CREATE PUBLICATION {publication} FOR TABLE {tables} WITH ({options});
