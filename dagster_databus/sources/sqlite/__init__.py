"""SQLite capture with triggers and a txlog table. ``source.SqliteSource`` is the facade over one module per
job: ``catalog`` (the tables' schemas), ``triggers`` (install, verify, uninstall), ``drift`` (tables changed
under their triggers), ``poll`` (the txlog read into change batches), ``snapshots`` (consistent reads, key
ranges); beneath them ``database`` (the file), ``render`` (the triggers' SQL and row images), ``batch`` (a txlog
chunk as a column batch), ``scan`` (the compiled scanner of the triggers' JSON), ``text`` (text that is not
UTF-8), ``bootstrap`` (a key range read by a task) and ``types`` (column types and values)."""
