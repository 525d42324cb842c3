"""The data plane below every engine, with no pyspark: Delta tables of the lake (snapshots, history, logical
tables) and their data files, statistics and commits; changes reduced per key; the history fold; the plans
and file reads that Spark tasks and the local engine both run; what the engines return (``results``)."""
