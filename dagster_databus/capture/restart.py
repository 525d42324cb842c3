"""``restart``: a source's change log and snapshots started afresh at the source's current position (``databus
bootstrap``), the old ones set aside in the lake's trash."""

from __future__ import annotations

import time

from dagster_databus.config import DatabusConfig
from dagster_databus.log.changelog import ChangeLog
from dagster_databus.sources import open_source


def restart(config: DatabusConfig, source: str) -> str | None:
    """Start a source's change log and snapshots afresh at the source's current position.

    The recovery for epoch changes, gaps and schema drift. The old log and snapshots are
    moved to ``<lake>/trash/`` (where, returned), not deleted. The next run bootstraps every
    snapshot from the source at an SCN at or after the new checkpoint.
    """
    src = open_source(config.source(source), config.lake)  # the server the old log was reading
    log = ChangeLog(config.lake, source)
    src.setup.require_installed()
    trash = f"trash/{source}-{time.strftime('%Y%m%dT%H%M%S')}"
    objects = config.lake.objects
    with log.writer(refuse_damage=False) as writer:  # a damaged log is exactly what this sets aside
        moved = False
        for folder, name in ((f"log/{source}/", "log"), (f"snapshot/{source}/", "snapshot"),
                             (f"bootstrap/{source}/", "bootstrap")):
            if config.lake.path is not None:  # a local lake: one rename per entry
                path = config.lake.path / folder
                if path.exists() and any(p.name != ".lock" for p in path.iterdir()):
                    (config.lake.path / trash / name).mkdir(parents=True)
                    for child in path.iterdir():
                        if child.name != ".lock":
                            child.rename(config.lake.path / trash / name / child.name)
                    moved = True
                continue
            for info in objects.list(folder):  # a store: a server-side copy per object
                objects.move(info.key, f"{trash}/{name}/{info.key[len(folder):]}")
                moved = True
        writer.adopt()
        start, state = src.stream.start_position()
        if start.is_beginning:  # a txlog source: start after everything it holds now
            start, state = src.stream.high_water_mark(), {}
        writer.start_at(start, src.stream.epoch(), state)
    return config.lake.where(trash) if moved else None
