-- The logical replication slot, decoded by pgoutput, created only when no slot has the name, so a second
-- install does no harm. Runs outside a transaction that has written (the server refuses otherwise) and
-- waits for transactions running now to end: the slot's first change is after them.
SELECT pg_create_logical_replication_slot(%(slot)s, 'pgoutput')
WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %(slot)s);
