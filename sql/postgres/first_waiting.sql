-- The first message of the first transaction the capture slot holds (its Begin, which carries the commit
-- time), decoded without consuming it: how long the oldest change not captured yet has waited. Stops after
-- that transaction; fails while a capture streams from the slot.
SELECT c.data
FROM pg_logical_slot_peek_binary_changes(
    %(slot)s, NULL, 1, 'proto_version', '1', 'publication_names', %(publication)s
) AS c
LIMIT 1;
