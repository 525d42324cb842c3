"""tests/package/: the package built into an sdist and a wheel, installed into a fresh environment, and the roads
users take with it (``databus`` from the wheel)."""

from tests.support.markers import folder_marks

pytest_collection_modifyitems = folder_marks(__file__, "wheel")
