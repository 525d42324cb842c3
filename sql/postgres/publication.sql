-- The publication capture reads (setup), if it exists: whether it is FOR ALL TABLES, which changes it
-- publishes, whether a partitioned table's changes are published as the table's (not its partitions')
-- and whether this user owns it.
SELECT
    p.oid,
    p.puballtables AS all_tables,
    p.pubinsert AS inserts,
    p.pubupdate AS updates,
    p.pubdelete AS deletes,
    p.pubtruncate AS truncates,
    p.pubviaroot AS via_root,
    coalesce(pg_has_role(p.pubowner, 'USAGE'), false) AS owned
FROM pg_publication AS p
WHERE p.pubname = %(publication)s;
