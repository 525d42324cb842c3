-- Drops txlog rows the change log has durably captured, and records how far it pruned so a later
-- capture that is behind this point fails loudly instead of skipping changes. The newest row is
-- always kept: SCNs are rowids, and the next change's is the largest plus one. Cuts and drift
-- ranges wholly below the point go with the changes they described.
DELETE FROM _databus_txlog WHERE scn <= :through_scn AND scn < (SELECT max(scn) FROM _databus_txlog);
DELETE FROM _databus_cuts WHERE scn <= :through_scn;
DELETE FROM _databus_drift WHERE through_scn <= :through_scn;
UPDATE _databus_settings SET value = CAST(MAX(CAST(value AS INTEGER), :through_scn) AS TEXT)
    WHERE name = 'pruned_through';
