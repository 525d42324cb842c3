-- Uninstall: this source's row of the signal table (each source of the database writes its own row).
-- Re-runnable without harm.
DELETE FROM `_databus_signal` WHERE source = %s
