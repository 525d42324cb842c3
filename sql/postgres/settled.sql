-- The commits of the published tables in the capture slot after its confirmed position and before an
-- exported snapshot's LSN, decoded without consuming them (a peek). Fails while a capture streams from
-- the slot; the caller then keeps the snapshot's own LSN.
SELECT c.data
FROM pg_logical_slot_peek_binary_changes(
    %(slot)s, %(upto)s::pg_lsn, NULL, 'proto_version', '1', 'publication_names', %(publication)s
) AS c
WHERE get_byte(c.data, 0) = 67;  -- 'C': a commit
