-- The server's lineage: the cluster's system identifier (initdb's; a restored base backup keeps it) and
-- the timeline WAL is written on now (a promotion starts a new one). The timeline is the first eight
-- hex digits of the current WAL file's name; a server in recovery has no current WAL position, so its
-- last checkpoint's timeline stands in.
SELECT
    (SELECT s.system_identifier FROM pg_control_system() AS s)::text AS system_identifier,
    CASE
        WHEN pg_is_in_recovery() THEN (SELECT c.timeline_id FROM pg_control_checkpoint() AS c)
        ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int
    END AS timeline;
