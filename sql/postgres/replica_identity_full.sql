-- Logs every column of a row's old image on UPDATE and DELETE (setup.install says which tables and why).
-- Takes the table's ACCESS EXCLUSIVE lock for a moment; re-runnable without harm.
ALTER TABLE {table} REPLICA IDENTITY FULL;
