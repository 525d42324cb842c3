"""dagster-databus: Databus-style change data capture, orchestrated by Dagster.

The core packages (``core``, ``sources``, ``log``, ``snapshot``) are plain Python with no
Dagster imports; ``defs`` adapts them to Dagster and ``definitions`` assembles the result.
"""
