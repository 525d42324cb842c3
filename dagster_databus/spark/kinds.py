"""What the two kinds of session (``spark.classic.ClassicSpark``, ``spark.connect.ConnectSpark``) look up alike:
PySpark's functions and Window and delta-spark's ``DeltaTable``, which PySpark and delta-spark pick by an
environment variable, not by session, so each kind names its own modules (one process may hold both kinds)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, ClassVar


class KindModules:
    """A session kind's PySpark functions and Window and delta-spark's ``DeltaTable``: the same names in other
    modules for classic Spark and Spark Connect, which each kind names."""

    FUNCTIONS: ClassVar[str]  # the kind's ``pyspark.sql.functions``
    WINDOW: ClassVar[str]  # the module of the kind's ``Window``
    DELTA_TABLES: ClassVar[str]  # the module of the kind's ``DeltaTable``

    def functions(self) -> ModuleType:
        return importlib.import_module(self.FUNCTIONS)

    def window(self) -> Any:
        return importlib.import_module(self.WINDOW).Window

    def delta_table(self) -> Any:
        return importlib.import_module(self.DELTA_TABLES).DeltaTable
