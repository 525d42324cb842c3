-- Removes one table's capture triggers. Re-runnable.
DROP TRIGGER IF EXISTS {trg_insert};
DROP TRIGGER IF EXISTS {trg_update};
DROP TRIGGER IF EXISTS {trg_rekey};
DROP TRIGGER IF EXISTS {trg_delete};
DROP TRIGGER IF EXISTS {trg_displace};
DROP TRIGGER IF EXISTS {trg_displace_update};
