-- A table's estimated rows and pages, as VACUUM and ANALYZE last counted them (reltuples is -1 for a table never
-- counted, and a partitioned parent has no pages of its own). They size the sample of pages a bootstrap's key
-- ranges are cut from (sources/generic/reads.py: KeyedReads.sampled_cuts). The parameter is the quoted table.
SELECT reltuples, relpages FROM pg_catalog.pg_class WHERE oid = pg_catalog.to_regclass(%s)
