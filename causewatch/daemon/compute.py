"""Where an analysis job's heavy numeric work runs: here, in the jobs worker (LocalCompute, the default),
or on a dask.distributed cluster (DaskCompute, `analysis_scheduler = "tcp://host:8786"`).

A compute is called as `compute(fn, *args)` with a module-level function and returns fn(*args);
`compute.map(fn, calls)` runs several at once (on a cluster, side by side), each result or error in
order. Only that pure part crosses to the cluster: the job's state, its reads and its writes stay with
the daemon (the only process that opens the DuckDB file), so a result is written whole, by the daemon,
or not at all.

Worker death is retried by the Dask scheduler (it re-runs a task whose worker died, up to its
`distributed.scheduler.allowed-failures`, then raises KilledWorker), a task's own error by `retries=`;
both are counted from the scheduler's story of the task. The scheduler unreachable, without workers,
lost mid-task or silent past `timeout`: the error is logged once per outage, the task runs here instead
(the jobs worker is the same idle-priority process as without a cluster: a re-learn is never lost to a
cluster outage), and the connection is tried again after `reconnect_after` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily

log = logging.getLogger("causewatch.daemon.compute")

RETRIES = 2                 # re-runs of a task that raised (dask's retries=); worker deaths are the scheduler's
CONNECT_SECONDS = 5.0       # to reach the scheduler
TIMEOUT_SECONDS = 600.0     # for a task's result: a cluster busy with other work may queue it this long
RECONNECT_SECONDS = 60.0    # after an outage, tasks run here this long before the scheduler is tried again
TASKS = "causewatch_analysis_tasks"
TASKS_HELP = "Heavy analysis tasks (causal learns) run, by where: local (the jobs worker) or cluster (Dask)"
RETRIED = "causewatch_analysis_task_retries"
RETRIED_HELP = ("Re-runs of analysis tasks on the Dask cluster, by cause: worker_lost (its worker died; the "
                "scheduler ran it again) or error (it raised; retried by retries=)")
FALLBACKS = "causewatch_analysis_fallbacks"
FALLBACKS_HELP = ("Analysis tasks run locally although analysis_scheduler is set, by reason: unreachable, "
                  "no_workers, lost (the scheduler went away mid-task), timeout")


def _counter(name: str, help: str, label: str, counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help, labels=[label])
    for value, n in counts.items():
        family.add_metric([value], n)
    return family


class LocalCompute:
    """fn(*args) here: today's behaviour, in whatever process runs the job."""
    where = "local"

    def __init__(self):
        self.tasks = {"local": 0}

    def __call__(self, fn: Callable, *args):
        self.tasks["local"] += 1
        return fn(*args)

    def map(self, fn: Callable, calls: list[tuple]) -> list:
        """fn(*args) for each args of `calls`, in order: each result, or the exception its call raised (so
        one failed call costs its own result only)."""
        return [_outcome(LocalCompute.__call__, self, fn, *args) for args in calls]

    def families(self) -> list:
        """The counters, for the job's snapshot (jobs.Publisher)."""
        return [_counter(TASKS, TASKS_HELP, "where", self.tasks)]


class DaskCompute(LocalCompute):
    """fn(*args) as one task on the Dask cluster whose scheduler is at `address` (a client is made on
    first use and kept); here instead when the cluster cannot be used (see the module's docstring)."""

    def __init__(self, address: str, retries: int = RETRIES, connect_timeout: float = CONNECT_SECONDS,
                 timeout: float = TIMEOUT_SECONDS, reconnect_after: float = RECONNECT_SECONDS,
                 clock: Callable[[], float] = time.monotonic, fall_back: bool = True):
        super().__init__()
        self.fall_back = fall_back   # False: a cluster that cannot be used raises ConnectionError (a CLI's choice)
        self.address, self.retries = address, retries
        self.connect_timeout, self.timeout, self.reconnect_after = connect_timeout, timeout, reconnect_after
        self.clock = clock
        self.where = address
        self.tasks["cluster"] = 0
        self.retried = {"worker_lost": 0, "error": 0}
        self.fallbacks = {"unreachable": 0, "no_workers": 0, "lost": 0, "timeout": 0}
        self._client = None
        self._down_until: float | None = None   # set while the cluster is out of use (an outage)
        self._reason = "unreachable"

    def __getstate__(self) -> dict:
        # a job crosses to its worker pickled (WorkerJobs' setup): the client is made where it runs
        return {**self.__dict__, "_client": None}

    def __call__(self, fn: Callable, *args):
        (result,) = self.map(fn, [args])
        if isinstance(result, Exception):
            raise result
        return result

    def map(self, fn: Callable, calls: list[tuple]) -> list:
        """Every call a task of the cluster at once (they run side by side), their results in order."""
        client = self._connect()
        if client is None:
            return super().map(fn, calls)
        from distributed import TimeoutError as DaskTimeout
        from distributed.client import FutureCancelledError
        futures = [client.submit(fn, *args, retries=self.retries, pure=False) for args in calls]
        results, lost = [], None
        try:
            for future in futures:
                try:
                    results.append(future.result(timeout=self.timeout))
                    self.tasks["cluster"] += 1
                except (FutureCancelledError, OSError) as e:   # OSError: distributed's CommClosedError among them
                    lost = ("lost", f"the scheduler went away during the task ({e})")
                    break
                except DaskTimeout:
                    lost = ("timeout", f"no result in {self.timeout:.0f} s (its workers busy or stuck)")
                    break
                except Exception as e:   # KilledWorker, or fn's own error after its retries
                    results.append(e)
        finally:
            if self._client is not None and self._client.status == "running":
                self._count_retries(client, [f.key for f in futures])
            for future in futures:
                future.release()   # the tasks not waited for are cancelled with their last reference
        if lost is None:
            return results
        self.close()
        self._outage(*lost)
        return results + super().map(fn, calls[len(results):])

    def families(self) -> list:
        return [*super().families(), _counter(RETRIED, RETRIED_HELP, "cause", self.retried),
                _counter(FALLBACKS, FALLBACKS_HELP, "reason", self.fallbacks)]

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close(timeout=self.connect_timeout)
            except Exception as e:   # a client whose scheduler is gone may fail to close: it is dropped all the same
                log.debug("closing the Dask client: %s", e)

    def _connect(self):
        """The client, or None while the cluster is out of use (then a task runs here)."""
        if self._down_until is not None and self.clock() < self._down_until:
            self.fallbacks[self._reason] += 1
            return None
        if self._client is not None and self._client.status not in ("running", "connecting"):
            self.close()   # a client that gave up reconnecting closes itself: a new one is made
        try:
            if self._client is None:
                from distributed import Client  # only where a scheduler is configured: ~17 MB more RSS
                self._client = Client(self.address, timeout=self.connect_timeout, set_as_default=False)
            workers = self._client.nthreads()
        except Exception as e:   # OSError and TimeoutError mostly; whatever it is, the cluster cannot be used
            self.close()
            self._outage("unreachable", f"cannot reach it ({type(e).__name__}: {e})")
            return None
        if not workers:
            self._outage("no_workers", "it has no workers")
            return None
        if self._down_until is not None:
            log.info("analysis scheduler %s: back in use; analysis tasks run on the cluster again", self.address)
            self._down_until = None
        return self._client

    def _outage(self, reason: str, what: str) -> None:
        if not self.fall_back:
            raise ConnectionError(f"analysis scheduler {self.address}: {what}")
        if self._down_until is None:   # logged once per outage, not at every task
            log.error("analysis scheduler %s: %s; analysis tasks run in the jobs worker instead, and the "
                      "scheduler is tried again in %.0f s", self.address, what, self.reconnect_after)
        self._reason = reason
        self._down_until = self.clock() + self.reconnect_after
        self.fallbacks[reason] += 1

    def _count_retries(self, client, keys: list) -> None:
        """Re-runs of the tasks, from the scheduler's transition log: each run after the first began
        when a run ended in `released`, by a task error (stimulus task-erred) or a worker's death."""
        try:
            story = client.sync(client.scheduler.get_story, keys_or_stimuli=keys, callback_timeout=10)
        except Exception as e:   # the count is lost, not the tasks
            log.debug("analysis scheduler %s: no story of tasks %s (%s)", self.address, keys, e)
            return
        for _, start, finish, _, stimulus, *_ in story:
            if start == "processing" and finish == "released":
                self.retried["error" if str(stimulus).startswith("task-erred") else "worker_lost"] += 1


def _outcome(call: Callable, *args):
    try:
        return call(*args)
    except Exception as e:
        return e


def compute_for(scheduler: str) -> LocalCompute:
    """The compute an `analysis_scheduler` setting names: "" is this process."""
    return DaskCompute(scheduler) if scheduler else LocalCompute()
