"""Payoff entries and best responses as parallel Ray tasks (``--match-workers N``, ``--br-workers N``).

One Ray session per population run (``RayTaskPool``): an embedded instance on this machine
(``suPER.embedded_ray``: token auth, stopped with the driver, SIGKILL included), or, for a run
submitted with ``--address`` (``--on-cluster`` in the job), the cluster the job runs in
(``ray.init(address="auto")``). Each kind of task goes through a ``Lane``: the task function, the CPUs one
task reserves and the most tasks in flight at once (the flag's N; 0 = no cap, on a cluster only).

- a match task is ``payoff.play_match`` (one entry, its E episodes batched in lockstep), one CPU;
- a best-response task is ``Population.best_response`` (the same trainer call as the sequential loop:
  ``campaigns.execute`` with the same seeds), ``--threads`` CPUs; the loop hands its task function to ``lane``
  (``suPER.population.loop._best_response_task``), so this module does not import the loop that uses it.

A task's result is exactly the local one (``wall_s`` aside): same seeds, same greedy policies, the same
single-process trainer with the same torch thread count. The table writes each entry the moment its task
returns, and a best response checkpoints in its own trainer run folder, so a killed run keeps every finished
entry and resumes an unfinished best response from its checkpoint. On a cluster with more than one node the
run folder (``--out``) must be storage every node sees, as for ``grid submit``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from suPER.population.payoff import play_match


def _match_task(*args: Any) -> dict[str, Any]:
    """``play_match`` in a worker, with one torch thread (workers share the machine's cores)."""
    from suPER.loop import set_threads

    set_threads(1)
    return play_match(*args)


class Lane:
    """One kind of task of a ``RayTaskPool``: ``imap(calls)`` runs ``task(*call)`` for every call.

    Args:
        remote: the task as a Ray remote function (its CPUs set).
        limit: most tasks in flight at once; 0 = all at once (Ray queues them by free CPUs).
    """

    def __init__(self, remote: Any, limit: int) -> None:
        self._remote, self.limit = remote, limit

    def imap(self, calls: Sequence[tuple[Any, ...]]) -> Iterator[tuple[int, Any]]:
        """Submit the calls (at most ``limit`` at a time); yield (index of the call, its result) as tasks finish."""
        import ray

        refs: dict[Any, int] = {}
        queue = list(enumerate(calls))
        while queue or refs:
            while queue and (not self.limit or len(refs) < self.limit):
                k, call = queue.pop(0)
                refs[self._remote.remote(*call)] = k
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)


class RayTaskPool:
    """A Ray session for the population run's tasks (see the module docstring).

    Args:
        num_cpus: CPUs of the embedded instance (ignored on a cluster).
        on_cluster: connect to the cluster this process runs in (a submitted job) instead.
    """

    def __init__(self, num_cpus: int, on_cluster: bool = False) -> None:
        import ray

        self.on_cluster = on_cluster
        self.handle = None
        if on_cluster:
            ray.init(address="auto", log_to_driver=False)
        else:
            from suPER import embedded_ray

            self.handle = embedded_ray.start(num_cpus=max(1, num_cpus))

    def lane(self, task: Callable[..., Any], num_cpus: int, limit: int) -> Lane:
        """A ``Lane`` running ``task`` with ``num_cpus`` CPUs per task, at most ``limit`` at a time."""
        import ray

        return Lane(ray.remote(num_cpus=num_cpus)(task), limit)

    def matches(self, limit: int) -> Lane:
        """Payoff entries (``payoff.play_match``), one CPU each: the ``pool`` of ``PayoffTable.fill``."""
        return self.lane(_match_task, 1, limit)

    def close(self) -> None:
        """Leave the cluster, or stop the embedded instance."""
        import ray

        if self.handle is None:
            ray.shutdown()
        else:
            from suPER import embedded_ray

            embedded_ray.stop(self.handle)
