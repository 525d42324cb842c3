-- The source that captures this database, recorded by its first install (:source, a bound parameter). One
-- database serves one source: its txlog, cuts, drift ranges, checked SCN and pruning are shared by every
-- reader, so a second source (or a second config naming the file) would lose changes to the first one's
-- pruning. Install and every poll refuse a source of another name. Re-runnable: the first owner is kept.
INSERT OR IGNORE INTO _databus_settings (name, value) VALUES ('owner_source', :source);
