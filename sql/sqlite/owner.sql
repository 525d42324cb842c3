-- The source recorded as capturing this database (set_owner.sql); no row before the first install of a
-- version that records it. Run only where _databus_settings exists.
SELECT value FROM _databus_settings WHERE name = 'owner_source';
