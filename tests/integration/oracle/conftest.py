"""tests/integration/oracle/: the Oracle source's own tests, on the server DATABUS_TEST_ORACLE_DSN names (skipped
without one)."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "server")
