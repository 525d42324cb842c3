-- Whether the publication's catalog row was written after the oldest catalog state the capture slot still
-- decodes with (its catalog_xmin): a publication dropped and created again (or altered) behind a slot that has
-- not decoded past it. Such a slot goes on failing to decode ("publication does not exist") after it is moved
-- on, so a change log that starts afresh makes it again instead. Reads only.
SELECT coalesce(age(p.xmin) < age(s.catalog_xmin), false) AS publication_newer
FROM pg_replication_slots AS s
CROSS JOIN pg_publication AS p
WHERE s.slot_name = %(slot)s AND p.pubname = %(publication)s;
