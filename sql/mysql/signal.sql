-- The signal table of watermark reads (bootstrap_reads: watermark): before a bootstrap reads a key
-- range it notes the binlog position and then writes one row here. MySQL commits transactions to
-- InnoDB in binlog order (binlog_order_commits), so once this write has committed, every transaction
-- at or before the noted position is visible to the read that follows. Capture never reads this
-- table; its rows are one per source, overwritten. Re-runnable without harm.
CREATE TABLE IF NOT EXISTS `_databus_signal` (
    source     VARCHAR(64) NOT NULL PRIMARY KEY,
    written_at DATETIME(6) NOT NULL,
    position   VARCHAR(128) NOT NULL
);
