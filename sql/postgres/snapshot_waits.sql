-- What creating a slot with an exported snapshot waits for: every transaction that holds a transaction id and
-- began before it, oldest first. A prepared transaction (PREPARE TRANSACTION) has no session: it waits for a
-- COMMIT PREPARED or ROLLBACK PREPARED, however long that takes.
SELECT
    'prepared' AS kind,
    p.gid AS name,
    p.database AS database_name,
    p.owner AS user_name,
    extract(EPOCH FROM now() - p.prepared)::bigint AS age_s
FROM pg_prepared_xacts AS p
UNION ALL
SELECT
    'session' AS kind,
    a.pid::text AS name,
    a.datname AS database_name,
    a.usename AS user_name,
    extract(EPOCH FROM now() - a.xact_start)::bigint AS age_s
FROM pg_stat_activity AS a
WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
ORDER BY age_s DESC;
