"""tests/integration/: capture, merge and consumers end to end on real sources. ``<kind>/`` holds one source
kind's tests (a server of its own for MariaDB, PostgreSQL and Oracle); ``common/`` the suites every kind runs, whose
tests tests/conftest.py marks ``server`` or ``spark`` by the kind and engine each runs with."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "integration")
