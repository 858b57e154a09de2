"""Payoff entries as parallel Ray tasks (``--match-workers N``): one task per entry, results as they finish.

Each task is ``payoff.play_match`` (one entry, its E episodes batched in lockstep) on one CPU of the
embedded Ray instance of ``suPER.campaigns.embedded_ray`` (token auth, stopped with the driver). A task's
entry is exactly the local one (same seeds, same greedy policies; ``wall_s`` aside), and the table writes
each entry the moment its task returns, so a killed run keeps every finished entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from suPER.population.payoff import play_match


def _match_task(*args: Any) -> dict[str, Any]:
    """``play_match`` in a worker, with one torch thread (workers share the machine's cores)."""
    from suPER.loop import set_threads

    set_threads(1)
    return play_match(*args)


class RayMatchPool:
    """Runs matches as Ray tasks on ``workers`` CPUs of an embedded Ray instance (started here).

    Args:
        workers: CPUs offered to Ray = tasks at a time.
    """

    def __init__(self, workers: int) -> None:
        import ray

        from suPER.campaigns import embedded_ray

        self.handle = embedded_ray.start(num_cpus=workers)
        self._remote = ray.remote(num_cpus=1)(_match_task)

    def imap(self, calls: Sequence[tuple[Any, ...]]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Submit every call; yield (index of the call, its entry) in the order the tasks finish."""
        import ray

        refs = {self._remote.remote(*c): k for k, c in enumerate(calls)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield refs[ref], ray.get(ref)

    def close(self) -> None:
        """Stop the Ray instance."""
        from suPER.campaigns import embedded_ray

        embedded_ray.stop(self.handle)
