"""The Spark data plane: the session, the Python data sources Spark reads the change log and the
sources through, and the functions Spark tasks run to write snapshot data files. No Dagster."""
