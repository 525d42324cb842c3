"""Oracle capture with Databus's triggers and ``sy$txlog``: ``source`` (the capture adapter, a record of
its four parts: ``catalog``, ``setup``, ``stream``, ``reads``), ``sql`` (scripts, templates and poll queries),
``types`` (column types and exact values)."""
