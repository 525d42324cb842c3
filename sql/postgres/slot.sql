-- The replication slot capture reads (setup), if it exists: its kind, plugin and database, whether a
-- connection streams from it, whether its WAL is still there (wal_status: reserved, extended,
-- unreserved, lost) and how much WAL it holds back on the server.
SELECT
    s.slot_type,
    s.plugin,
    s.database,
    s.active,
    s.active_pid,
    s.wal_status,
    s.restart_lsn::text AS restart_lsn,
    s.confirmed_flush_lsn::text AS confirmed_flush_lsn,
    pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint AS retained_bytes
FROM pg_replication_slots AS s
WHERE s.slot_name = %(slot)s;
