-- Uninstall: the signal table, once no source's row is left in it. Re-runnable without harm.
DROP TABLE IF EXISTS `_databus_signal`
