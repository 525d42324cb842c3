-- What logical decoding needs of the server and of the user capture connects as (setup.verify): the
-- settings, how many replication slots and walsenders are taken, and the user's privileges.
SELECT
    current_setting('server_version') AS server_version,
    current_setting('server_version_num')::int AS server_version_num,
    pg_is_in_recovery() AS in_recovery,
    current_setting('wal_level') AS wal_level,
    current_setting('max_replication_slots')::int AS max_replication_slots,
    (SELECT count(*) FROM pg_replication_slots)::int AS slots_used,
    current_setting('max_wal_senders')::int AS max_wal_senders,
    (SELECT count(*) FROM pg_stat_replication)::int AS wal_senders_used,
    current_user AS user_name,
    r.rolsuper AS superuser,
    r.rolreplication AS replication,
    has_database_privilege(current_database(), 'CREATE') AS may_create
FROM pg_roles AS r
WHERE r.rolname = current_user;
