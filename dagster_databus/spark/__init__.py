"""The Spark data plane: the runtime the engines run their jobs on (``runtime``: a classic session, ``classic``,
or a Spark Connect client, ``connect``), the Python data sources Spark reads the change log, the sources and
Delta files through, and the spark and delta-spark engines (``engine``, ``delta_spark``). No Dagster."""
