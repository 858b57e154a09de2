"""What a run reserved on Ray (CPUs, GPUs) means for the run itself: its torch threads and device.

One rule for ``grid run`` (Tune trials, ``local``) and ``grid submit`` (cluster jobs, ``cluster``).
"""

from __future__ import annotations


def run_resources(cpus: float, gpus: float) -> tuple[int, str]:
    """(torch threads, device) of a run that reserved ``cpus`` CPUs and ``gpus`` GPUs.

    Threads = the whole CPUs reserved (at least 1), so runs sharing a node do not oversubscribe it; the
    device is ``cuda`` exactly when a GPU (or a fraction of one) is reserved, else ``cpu``: a run never
    uses a GPU that Ray did not give it.

    Args:
        cpus: CPUs per run (``--cpus-per-trial`` / ``--cpus``).
        gpus: GPUs per run (``--gpus-per-trial`` / ``--gpus``).

    Returns:
        ``(threads, device)`` for ``run.threads`` / ``run.device``.
    """
    return max(1, int(cpus)), "cuda" if gpus > 0 else "cpu"
