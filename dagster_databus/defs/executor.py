"""The runs' executor: one process for a run whose steps form a chain, a process per step where steps
can run side by side.

Dagster's default starts a process per step (about 3 s of Python and imports each) even when the steps
must run one after another; a source's sync is one step (``assets.build_source_assets``), so a run of one
source, with or without its reconciliation or logical tables downstream, runs in the run's own process and
starts Spark once. A run over several sources still runs their steps in parallel processes, and when several
fail, the run's failure names each one's error.
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING

import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableJob
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.in_process import InProcessExecutor
from dagster._core.executor.multiprocess import MultiprocessExecutor
from dagster_shared.error import SerializableErrorInfo

if TYPE_CHECKING:
    from dagster._core.events import DagsterEvent
    from dagster._core.execution.context.system import PlanOrchestrationContext
    from dagster._core.execution.plan.plan import ExecutionPlan


class ChainInProcessExecutor(dg.Executor):
    """In process when no two steps of the plan could run at once, else Dagster's multiprocess executor."""

    def __init__(self, retries: RetryMode, max_concurrent: int | None) -> None:
        self._retries = retries
        self._in_process = InProcessExecutor(retries=retries)
        self._multiprocess = MultiprocessExecutor(retries=retries, max_concurrent=max_concurrent)

    @property
    def retries(self) -> RetryMode:
        return self._retries

    def execute(self, plan_context: "PlanOrchestrationContext", execution_plan: "ExecutionPlan"
                ) -> Iterator["DagsterEvent"]:
        parallel = any(len(level) > 1 for level in execution_plan.get_steps_to_execute_by_level())
        # A process per step needs a job it can rebuild and an instance the processes share.
        can_fork = isinstance(plan_context.reconstructable_job, ReconstructableJob) and \
            not plan_context.instance.is_ephemeral
        chosen = self._multiprocess if parallel and can_fork else self._in_process
        # Dagster's RUN_FAILURE carries the error of the first STEP_FAILURE handed up: when several sources'
        # steps fail, it would name one. Failures are held until the steps are done and handed up, the first naming
        # them all (each step's own event is in the event log already, as it happened; these feed the run's end).
        failures: list[DagsterEvent] = []
        for event in chosen.execute(plan_context, execution_plan):
            if event.is_step_failure:
                failures.append(event)
            else:
                yield event
        if len(failures) > 1:
            failures[0] = naming_all(failures)
        yield from failures


def naming_all(failures: "list[DagsterEvent]") -> "DagsterEvent":
    """The first of ``failures`` (STEP_FAILURE events) with an error that names every step's problem."""
    first = failures[0]
    lines = []
    for event in failures:
        data = event.step_failure_data
        said = data.user_failure_data.description if data.user_failure_data is not None else None
        lines.append(f"- {event.step_key}: {(said or (data.error.message if data.error else 'failed')).strip()}")
    error = SerializableErrorInfo(message=f"{len(failures)} steps failed:\n" + "\n".join(lines), stack=[],
                                  cls_name="StepFailures", cause=first.step_failure_data.error)
    return first._replace(event_specific_data=first.step_failure_data._replace(error=error))


@dg.executor(
    name="databus_executor",
    config_schema={
        "retries": dg.Field(dict, default_value={"enabled": {}}, description="as Dagster's executors' `retries`"),
        "max_concurrent": dg.Field(dg.Noneable(int), default_value=None,
                                   description="parallel step processes when steps can run side by side "
                                               "(default: the machine's cores)"),
    },
)
def databus_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    config = init_context.executor_config
    return ChainInProcessExecutor(RetryMode.from_config(config["retries"]), config["max_concurrent"])  # type: ignore[arg-type]
