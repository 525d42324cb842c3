"""Oracle capture with Databus's triggers and ``sy$txlog``: ``source`` (the capture adapter), ``sql``
(scripts, templates and poll queries), ``bootstrap`` (key-range reads for tasks), ``types`` (column types
and exact values)."""
