"""SQLite capture with triggers and a txlog table: ``source`` (the capture adapter), ``batch`` (a txlog
chunk as a column batch), ``scan`` (the compiled scanner of the triggers' JSON), ``bootstrap`` (key-range
reads for tasks), ``types`` (column types and values)."""
