-- Drops the source's replication slot when it exists in this database and nothing streams from it (an
-- active slot is refused by setup.uninstall before this runs). Re-runnable without harm.
SELECT pg_drop_replication_slot(s.slot_name)
FROM pg_replication_slots AS s
WHERE s.slot_name = %(slot)s AND s.database = current_database() AND NOT s.active;
