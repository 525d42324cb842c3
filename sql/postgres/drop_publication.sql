-- Drops the source's publication. Re-runnable without harm.
DROP PUBLICATION IF EXISTS {publication};
