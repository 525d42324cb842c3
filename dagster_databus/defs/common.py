"""What the Dagster layer's modules share: the resource key, asset keys, pools and error handling."""

import contextlib
from collections.abc import Iterator
from typing import Any, TypeAlias

import dagster as dg

from dagster_databus.errors import DatabusError

# The resource's key in the Definitions, and so the name of the parameter assets, checks and ops take
# it by (``databus: DatabusResource``): Dagster matches a typed resource parameter by its name.
RESOURCE = "databus"
# What an asset, check or observation carries as metadata: numbers, text and ``MetadataValue`` s (Dagster's
# own name for the value union is private).
Metadata: TypeAlias = dict[str, Any]
MAX_RETRIES = 3
BASE_BACKOFF_S = 5


def capture_key(source: str) -> dg.AssetKey:
    return dg.AssetKey([source, "capture"])


def changelog_key(source: str) -> dg.AssetKey:
    return dg.AssetKey([source, "changelog"])


def snapshot_key(source: str, table: str) -> dg.AssetKey:
    return dg.AssetKey([source, table])


def pool(source: str, step: str) -> str:
    return f"databus_{source}_{step}"


@contextlib.contextmanager
def clear_errors(context: Any = None) -> Iterator[None]:
    """Show the capture layer's own message at the top of a failed run, not a traceback.

    A transient error (an unreachable server, a lock a concurrent run holds) is retried with exponential
    backoff, and after the last attempt fails in a way a run or job retry policy may still retry. A
    permanent one fails at once with ``allow_retries=False``: the same step would fail the same way until
    someone acts on the fix, so a ``RetryPolicy`` must not spend its attempts on it."""
    try:
        yield
    except DatabusError as exc:
        metadata = {"problem": exc.problem, "fix": exc.fix, "error": type(exc).__name__,
                    "retry": "transient: may succeed when run again" if exc.transient
                    else "permanent: fails the same way until the fix is applied"}
        if exc.transient:
            attempt = getattr(context, "retry_number", MAX_RETRIES) if context is not None else MAX_RETRIES
            if attempt < MAX_RETRIES:
                raise dg.RetryRequested(max_retries=MAX_RETRIES,
                                        seconds_to_wait=BASE_BACKOFF_S * 2 ** attempt) from exc
        raise dg.Failure(description=str(exc), metadata=metadata, allow_retries=exc.transient) from exc
