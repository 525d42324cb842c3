"""tests/integration/postgres/: the PostgreSQL source's own tests, on a server they start."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "server")
