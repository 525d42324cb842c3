-- Confirm the capture slot at a position the change log holds durably, when the feedback a finished capture
-- sent did not reach the server before its connection closed. The server decodes the WAL between without
-- output; a position at or before the slot's own is refused by the server, so the caller asks only past it.
SELECT end_lsn::text AS end_lsn
FROM pg_replication_slot_advance(%(slot)s, %(upto)s::pg_lsn);
