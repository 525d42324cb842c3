"""How a bootstrap's (or a refresh's) key ranges are dealt into Spark tasks (``spark.jobs.range_tasks``)."""

from __future__ import annotations

import pytest

from dagster_databus.spark.jobs import RANGES_PER_TASK, range_tasks


@pytest.mark.parametrize(("ranges", "slots"), [(1, 2), (2, 2), (3, 2), (8, 2), (10, 2), (16, 2), (17, 2),
                                               (100, 2), (100, 64), (5, 8), (1000, 3)])
def test_every_range_is_read_by_exactly_one_task(ranges: int, slots: int) -> None:
    indices = list(range(ranges))
    tasks = range_tasks(indices, slots)
    assert sorted(i for t in tasks for i in t) == indices
    assert all(tasks)  # no empty task
    # As many tasks as slots, while no task reads more than RANGES_PER_TASK; never more tasks than ranges.
    assert len(tasks) == min(ranges, max(slots, -(-ranges // RANGES_PER_TASK)))
    assert max(map(len, tasks)) - min(map(len, tasks)) <= 1
    if len(tasks) > slots:
        assert max(map(len, tasks)) <= RANGES_PER_TASK


def test_neighbouring_ranges_go_to_different_tasks() -> None:
    assert range_tasks(list(range(10)), 2) == [(0, 2, 4, 6, 8), (1, 3, 5, 7, 9)]
    assert range_tasks([3, 4, 7, 9], 2) == [(3, 7), (4, 9)]  # a resumed bootstrap's ranges keep their indices
    assert range_tasks([], 4) == []
