"""tests/unit/: no server, no Spark, no built wheel, no dagster dev or browser; what plain ``pytest`` (and
``make test-fast``) runs. A test here that takes a server's or Spark's fixture or parameter fails the collection."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "unit", refuse=("spark", "server", "wheel", "fault"))
