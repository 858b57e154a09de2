"""Baseline trainers beside the DQN family: MADDPG and QMIX (SEAC lives in ``seac/``).

Each module has one ``train(cfg, folder, logger, progress) -> Summary`` that reads top to bottom and
leaves envs, the evaluation schedule, metrics.csv, checkpoints and resume to ``suPER.loop.RunLoop``.
Each is registered as an ``AlgorithmSpec`` in ``suPER/config.py`` (``--algo`` key -> section, trainer
string, flag routes); docs/extending.md "Add an algorithm" is the checklist. Writing ``train``:
build ``RunLoop``, the nets and the buffer, ``loop.restore()``, step-0 ``loop.evaluate`` + ``loop.save``,
then the loop (act, step, record, store, learn, sync target, log) and ``loop.finish``. Mask dead
learners (``alive_N``) in losses.
"""
