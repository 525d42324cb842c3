"""tests/ui/: Dagster's definitions run in an instance, ``dagster dev`` driven by a browser, and the component
``dg`` builds from the installed wheel."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "ui")
