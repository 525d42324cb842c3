"""SCN and Position: ordered, immutable, bounded, never compared across epochs."""

from __future__ import annotations

import dataclasses

import pytest

from dagster_databus.core.scn import Position, Scn
from dagster_databus.errors import EpochMismatchError


def test_scn_orders_by_value_and_round_trips_as_text() -> None:
    values = [Scn(5), Scn(1), Scn.MAX, Scn.BEGINNING, Scn(2**40)]
    assert sorted(values) == [Scn(0), Scn(1), Scn(5), Scn(2**40), Scn(2**63 - 1)]
    assert Scn.parse(str(Scn(2**62 + 3))) == Scn(2**62 + 3)
    assert Scn.BEGINNING.is_beginning and not Scn(1).is_beginning


@pytest.mark.parametrize("bad", [-1, 2**63, "12a", "", True, 1.5])
def test_scn_rejects_values_outside_64_bits_or_not_integers(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        Scn.parse(bad) if isinstance(bad, str) else Scn(bad)  # type: ignore[arg-type]


def test_scn_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Scn(1).value = 2  # type: ignore[misc]


def test_binlog_scn_puts_file_number_above_offset() -> None:
    assert Scn.from_binlog(3, 1024).value == (3 << 32) | 1024
    assert Scn.from_binlog(2, 2**32 - 1) < Scn.from_binlog(3, 4)
    with pytest.raises(ValueError):
        Scn.from_binlog(1, 2**32)


def test_a_failover_era_orders_every_later_position_after_every_earlier_one() -> None:
    last_of_era0 = Scn.from_binlog(2**20 - 1, 2**32 - 1)
    first_of_era1 = Scn.from_binlog(1, 4, era=1)
    assert last_of_era0 < first_of_era1 < Scn.from_binlog(1, 5, era=1) < Scn.from_binlog(1, 4, era=2)
    assert Scn.from_binlog(7, 1234, era=3).binlog_parts() == (3, 7, 1234)
    assert Scn.from_binlog(7, 1234).value == (7 << 32) | 1234  # era 0: the pre-failover encoding, unchanged
    with pytest.raises(ValueError):
        Scn.from_binlog(2**20, 4)  # would spill into the era bits
    with pytest.raises(ValueError):
        Scn.from_binlog(1, 4, era=2**11)


def test_positions_compare_within_an_epoch_and_refuse_across_epochs() -> None:
    assert Position("a", Scn(1)) < Position("a", Scn(2))
    with pytest.raises(EpochMismatchError, match="bootstrap"):
        _ = Position("a", Scn(1)) < Position("b", Scn(2))
