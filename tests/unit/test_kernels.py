"""The package's numba kernels where numba can write no cache folder (a read-only image run by a user without a
home): they compile in each process, and one warning names the fix, rather than the package failing to import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.checks import immutable, make_read_only
from tests.support.paths import REPO

MODULE = '''
from dagster_databus.core.kernels import kernel


@kernel
def add(a, b):
    return a + b


@kernel(nogil=False)
def twice(a):
    return add(a, a)
'''

PROBE = '''
import warnings
import numba

try:  # what the package's kernels met before: numba refuses cache=True where it can write no folder
    numba.njit(cache=True)(lambda a: a)
    print("numba found a cache folder")
except RuntimeError as exc:
    print("numba refused:", "no locator available" in str(exc))
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    import kernels_here
    print("results:", kernels_here.add(2, 3), kernels_here.twice(4))
print("warnings:", len(said))
for w in said:
    print(w.category.__name__, str(w.message))
'''



def test_kernels_compile_where_no_cache_folder_can_be_written_and_one_warning_names_the_fix(tmp_path: Path) -> None:
    folder = tmp_path / "readonly"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "kernels_here.py").write_text(MODULE)
    (folder / "probe.py").write_text(PROBE)
    make_read_only(folder / "__pycache__")
    try:
        assert immutable(folder, True)
        env = {**os.environ, "NUMBA_CACHE_DIR": "/dev/null/numba", "HOME": "/dev/null", "XDG_CACHE_HOME": "/dev/null",
               "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)]), "PYTHONDONTWRITEBYTECODE": "1"}
        run = subprocess.run([sys.executable, str(folder / "probe.py")], env=env, capture_output=True, text=True,
                             timeout=300)
    finally:
        immutable(folder, False)
        immutable(folder / "__pycache__", False)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout.splitlines()
    assert out[0] == "numba refused: True", run.stdout  # the setting is real: no folder is writable
    assert out[1] == "results: 5 8" and out[2] == "warnings: 1", run.stdout
    assert out[3].startswith("RuntimeWarning numba cannot cache dagster-databus's compiled kernels (kernels_here.add")
    assert "NUMBA_CACHE_DIR=/dev/null/numba" in out[3] and "Fix: set NUMBA_CACHE_DIR to a folder" in out[3]
    assert not list((folder / "__pycache__").iterdir())

