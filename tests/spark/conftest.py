"""tests/spark/: tests that need a Spark session (the standalone cluster, Spark Connect, delta-spark)."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "spark")
