"""Objects handed to Spark tasks through a data source's string options: pickled, then base64."""

from __future__ import annotations

import base64
import pickle
from typing import Any


def pack(obj: Any) -> str:
    return base64.b64encode(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def unpack(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))
