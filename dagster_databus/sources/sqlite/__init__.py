"""SQLite capture with triggers and a txlog table. ``source.SqliteSource`` is a record of its four
parts, each a module named after it: ``catalog`` (the tables' schemas), ``setup`` (the triggers installed,
verified, removed), ``stream`` (the txlog read into change batches), ``reads`` (consistent reads, key ranges, a
key range read by a task); beside them ``drift`` (tables changed under their triggers), and beneath them
``database`` (the file), ``render`` (the triggers' SQL and row images), ``batch`` (a txlog chunk as a column
batch), ``scan`` (the compiled scanner of the triggers' JSON), ``text`` (text that is not UTF-8) and ``types``
(column types and values)."""
