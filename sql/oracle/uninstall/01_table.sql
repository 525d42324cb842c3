-- Removes one table's capture objects (the installer skips a DROP whose object is absent).
DROP TRIGGER {trigger};
DROP TRIGGER {delete_trigger};
DROP VIEW {view};
DROP TABLE {shadow} PURGE;
DROP INDEX {txn_index};
ALTER TABLE {table} DROP (txn);
