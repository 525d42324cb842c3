"""The Spark data plane: the runtime the engines run their jobs on (``runtime``: a classic session, ``classic``,
or a Spark Connect client, ``connect``), the Python data sources Spark reads the change log, the sources and
Delta files through, and the Spark jobs the spark engine (``engines.spark``) is assembled from (``range_reads``,
``merge``, ``history``, ``logical``, ``verify`` on ``jobs``). No Dagster."""
