-- Drops txlog rows the change log has durably captured, and records how far it pruned so
-- a later capture that is behind this point fails loudly instead of skipping changes.
DELETE FROM _databus_txlog WHERE scn <= :through_scn;
UPDATE _databus_settings SET value = CAST(MAX(CAST(value AS INTEGER), :through_scn) AS TEXT)
    WHERE name = 'pruned_through';
