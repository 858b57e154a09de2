"""Executing a pack: R runs, each in its own run folder exactly as ``execute`` handles one, trained as one program.

Why this shape: ``execute`` owns everything around a run's training (writer lock, fresh / resume / refusal,
manifest, W&B logger, final status, curve), and a packed run must keep all of it per run. So each run goes
through its own ``execute`` call, in its own thread, with a ``train_fn`` that does not train: it hands
(cfg, folder, logger) to the pack and waits. Once every run has either arrived or been refused, the
calling thread trains the arrived runs with ``suPER.native.packed.train_pack`` and hands each thread its
run's Summary (or exception); ``execute`` then finishes that run's folder as usual (finished / failed /
interrupted). A refused run (e.g. a finished folder) simply is not in the pack.

Threads only wait here: all training (torch, envs) runs in the calling thread, which also receives Ctrl-C;
an interrupt is handed to every waiting run, so each manifest says ``interrupted`` and stays resumable.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from suPER import config as C


@dataclass
class _Slot:
    """One run's meeting point: what its ``execute`` handed over, and what it gets back."""

    args: tuple[Any, ...] | None = None
    result: Any = None
    outcome: Any = None
    ended: bool = False


def execute_pack(cfgs: Sequence[C.ExperimentConfig], overwrite: bool = False, backend: str = "native",
                 extra_manifests: Sequence[dict[str, Any]] | None = None,
                 progress: Sequence[Any] | None = None) -> list[Any]:
    """Train ``cfgs`` as one pack, each into its own run folder (``execute``'s semantics per run).

    Args:
        cfgs: validated configs that ``suPER.native.packed.check_packable`` accepts.
        overwrite: as for ``execute``, per run.
        backend: must be ``native`` (the packed trainer is native).
        extra_manifests: per run, further manifest fields (``grid run --pack``: its grid and entry).
        progress: per run, its ``execute`` progress callback (``train_pack``'s ``run_progress``).

    Returns:
        Per run, its Summary or the exception that stopped or refused it.

    Raises:
        ConfigError: the runs cannot be packed, or another backend (nothing written).
    """
    from suPER.campaigns.execute import execute
    from suPER.native.packed import check_packable, train_pack

    if backend != "native":
        raise C.ConfigError(f"--pack: packed runs use the native trainer, got --backend {backend}")
    check_packable(cfgs)
    pack_info = {"size": len(cfgs), "runs": [c.run_name for c in cfgs], "trainer": "suPER.native.packed"}
    slots = [_Slot() for _ in cfgs]
    extras = list(extra_manifests) if extra_manifests is not None else [{} for _ in cfgs]
    progress = list(progress) if progress is not None else [None] * len(cfgs)
    cond = threading.Condition()

    def handed_over(i: int) -> Any:
        def train_fn(cfg: C.ExperimentConfig, folder: Any, logger: Any = None, progress: Any = None) -> Any:
            with cond:
                slots[i].args = (cfg, folder, logger, progress)
                cond.notify_all()
                cond.wait_for(lambda: slots[i].result is not None)
            if isinstance(slots[i].result, BaseException):
                raise slots[i].result
            return slots[i].result
        return train_fn

    def run_thread(i: int) -> None:
        try:
            slots[i].outcome = execute(cfgs[i], overwrite=overwrite, backend=backend, train_fn=handed_over(i),
                                       progress=progress[i], extra_manifest={"pack": pack_info, **extras[i]})
        except BaseException as exc:  # noqa: BLE001 - reported to the caller per run
            slots[i].outcome = exc
        finally:
            with cond:
                slots[i].ended = True
                cond.notify_all()

    threads = [threading.Thread(target=run_thread, args=(i,), name=f"pack-{i}", daemon=True) for i in range(len(cfgs))]
    for t in threads:
        t.start()
    with cond:
        cond.wait_for(lambda: all(s.args is not None or s.ended for s in slots))
    ready = [i for i, s in enumerate(slots) if s.args is not None and not s.ended]
    results: list[Any]
    try:
        if ready:
            args = [slots[i].args for i in ready]
            results = train_pack([a[0] for a in args], [a[1] for a in args],  # type: ignore[index]
                                 [a[2] for a in args], run_progress=[a[3] for a in args])  # type: ignore[index]
        else:
            results = []
    except BaseException as exc:  # the shared part failed (or Ctrl-C): every run of the pack stops with it
        results = [exc] * len(ready)
    with cond:
        for i, res in zip(ready, results):
            slots[i].result = res
        cond.notify_all()
    for t in threads:
        t.join()
    interrupted = [s.outcome for s in slots if isinstance(s.outcome, KeyboardInterrupt)]
    if interrupted:
        raise interrupted[0]
    return [s.outcome for s in slots]


def report(cfgs: Sequence[C.ExperimentConfig], outcomes: Sequence[Any]) -> int:
    """One line per run of a pack (stdout for finished runs, stderr for the others); the exit code.

    Returns:
        0 when every run finished, 2 when one was refused (bad input), else 1.
    """
    from suPER.runs import RunFolderError

    code = 0
    for cfg, out in zip(cfgs, outcomes):
        if isinstance(out, BaseException):
            refused = isinstance(out, (RunFolderError, C.ConfigError))
            print(f"error: {cfg.run_name}: {out}" if refused else
                  f"error: {cfg.run_name}: stopped ({type(out).__name__}: {out}); its folder is resumable",
                  file=sys.stderr)
            code = max(code, 2 if refused else 1)
        else:
            print(f"{cfg.run_name}: final team return {out.final_team_return:.3f} after {out.env_steps} env steps "
                  f"({out.env_steps_per_sec:.0f} env steps/s training, in a pack of {len(cfgs)})")
    return code
