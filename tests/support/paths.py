"""Where the checkout and the tests' recorded data are, whatever folder a test module sits in."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
