"""Objects as text, pickled then base64: what Spark tasks get through a data source's string options, and the
key ranges a bootstrap's plan keeps in the lake (``dataplane.resume``)."""

from __future__ import annotations

import base64
import pickle
from typing import Any


def pack(obj: Any) -> str:
    return base64.b64encode(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def unpack(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))
