-- Closes the current epoch: every txlog row stamped with it belongs to a committed
-- transaction once this commits. Run inside BEGIN IMMEDIATE; returns the closed epoch.
UPDATE _databus_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch - 1 AS closed_epoch;
