"""tests/faults/: the fault scenarios (processes killed at each boundary, servers lost, disks full, clocks
jumping), long runs of their own: ``make test-faults``. Scenarios elsewhere carry ``@pytest.mark.fault``."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "fault")
