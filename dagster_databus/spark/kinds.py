"""What the two kinds of session (``spark.classic.ClassicSpark``, ``spark.connect.ConnectSpark``) look up alike:
PySpark's functions and Window and delta-spark's ``DeltaTable``, which PySpark and delta-spark pick by an
environment variable, not by session, so each kind takes them from its own modules (one process may hold both
kinds)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, ClassVar, Final, NamedTuple


class _Modules(NamedTuple):
    functions: str  # the kind's ``pyspark.sql.functions``
    window: str  # the module of the kind's ``Window``
    delta_tables: str  # the module of the kind's ``DeltaTable``


# Each kind's modules, by whether it is Spark Connect.
_MODULES: Final = {
    False: _Modules("pyspark.sql.functions", "pyspark.sql", "delta.tables"),
    True: _Modules("pyspark.sql.connect.functions", "pyspark.sql.connect.window", "delta.connect.tables"),
}


class KindModules:
    """A session kind's PySpark functions and Window and delta-spark's ``DeltaTable``, from its kind's modules."""

    connect: ClassVar[bool]  # whether the kind is Spark Connect

    def functions(self) -> ModuleType:
        return importlib.import_module(_MODULES[self.connect].functions)

    def window(self) -> Any:
        return importlib.import_module(_MODULES[self.connect].window).Window

    def delta_table(self) -> Any:
        return importlib.import_module(_MODULES[self.connect].delta_tables).DeltaTable
