-- Makes an existing publication name exactly the configured tables, without row filters or column lists
-- (SET TABLE replaces its whole list). Re-runnable without harm.
ALTER PUBLICATION {publication} SET TABLE {tables};
