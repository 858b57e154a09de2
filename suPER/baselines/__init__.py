"""Baseline trainers beside the DQN family: MADDPG and QMIX (SEAC lives in ``seac/``).

Each module has one ``train(cfg, folder, logger, progress) -> Summary`` that reads top to bottom and
leaves envs, the evaluation schedule, metrics.csv, checkpoints and resume to ``suPER.loop.RunLoop``.
``suPER.campaigns.TRAINERS`` maps the ``--algo`` key to the module.

Adding a baseline:
    1. Add its config section (a dataclass with a docstring under every field) to ``suPER/config.py``:
       a field of ``ExperimentConfig`` and entries in ``ALGOS``, ``ALGO_SECTIONS`` and ``ALGO_PRESETS``.
    2. Write ``suPER/baselines/<key>.py`` with ``train``: build ``RunLoop``, the nets and the buffer,
       ``loop.restore()``, step-0 ``loop.evaluate`` + ``loop.save``, then the loop (act, step, record,
       store, learn, sync target, log) and ``loop.finish``. Mask dead learners (``alive_N``) in losses.
    3. Register it in ``suPER.campaigns.TRAINERS`` and replace the ``pending`` grid entries in
       ``experiments/paper_grid.yaml`` with real ones.
    4. Add ``tests/baselines/test_<key>.py``: the loss on a tiny hand-checked batch, a CLI smoke run on
       every env, and a seeded bounded learning check on a small pursuit.
    5. Record deviations from the original in ``docs/decisions.md`` and results in ``docs/results.md``.
"""
