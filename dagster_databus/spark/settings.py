"""Session settings every run needs, whatever the master; a Connect session sets them on the server's session
for this client (where the server fixed one at its start, its own value stands)."""

SESSION_CONF = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC",
                "spark.sql.execution.arrow.pyspark.enabled": "true"}
