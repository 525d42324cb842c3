-- Move the capture slot on to the WAL written now, for a change log that starts afresh (install, bootstrap):
-- the snapshots are read after this point, so nothing before it is needed, and WAL an earlier log could not
-- capture (an update logged without its old row) is passed over. The server decodes the WAL between without
-- output and stops at what is flushed; the position it reached is where the log starts.
SELECT end_lsn::text AS end_lsn
FROM pg_replication_slot_advance(%(slot)s, pg_current_wal_insert_lsn());
