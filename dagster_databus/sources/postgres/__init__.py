"""PostgreSQL capture by logical decoding: ``pgoutput`` messages of a publication, read from a replication slot."""
