"""Every learner reads uint8 image observations scaled by ``EnvSpec.obs_scale`` (1 / 255): the DQN nets, QMIX's
agent net and mixer state, MADDPG's actors and critics, SEAC's actor-critics.

A network scaled at its input reads on ``image_env`` exactly what an unscaled one reads on ``float_image_env``,
whose observations are the same canvas already multiplied by float32(1 / 255) (tests/envs/tiny_pz.py). So with one
seed the two trainings are the same run: every metrics row agrees. Without the scaling the uint8 run's networks
would read 0..255 and its rows part from the twin's.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from suPER import cli

IMAGE, TWIN = "pettingzoo:tests.envs.tiny_pz:image_env", "pettingzoo:tests.envs.tiny_pz:float_image_env"

LEARN_EARLY = {
    "ddqn": ["--set", "dqn.hiddens=16", "--set", "dqn.batch_size=8", "--set", "dqn.learning_starts=20",
             "--set", "dqn.model=conv"],
    "qmix": ["--set", "qmix.learning_starts=20", "--set", "qmix.rnn_hidden=16"],
    "maddpg": ["--set", "maddpg.learning_starts=20", "--set", "maddpg.batch_size=8",
               "--set", "maddpg.rollout_fragment_length=8"],
    "seac": ["--set", "seac.num_envs=2", "--set", "seac.model=conv"],
}
"""per algorithm: settings that make it learn within the 60-step budget (SEAC learns from its first rollout)"""

TIMING = ("per_sec", "wall_time")


def metric_rows(folder: Path) -> list[dict[str, str]]:
    (run,) = [p for p in folder.iterdir() if (p / "metrics.csv").is_file()]
    with (run / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in csv.DictReader(f)]


@pytest.mark.parametrize("algo", list(LEARN_EARLY))
def test_uint8_images_train_as_their_scaled_float_twin(algo: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    common = ["train", "--algo", algo, "--num-timesteps", "60", "--eval-interval", "30", "--eval-episodes", "2",
              "--seed", "3", "--no-progress", "--no-wandb", *LEARN_EARLY[algo]]
    for env, out in ((IMAGE, tmp_path / "uint8"), (TWIN, tmp_path / "float")):
        assert cli.main([*common, "--env", env, "--out", str(out)]) == 0, capsys.readouterr().err
    uint8, twin = metric_rows(tmp_path / "uint8"), metric_rows(tmp_path / "float")
    assert [r["env_steps"] for r in uint8] == [r["env_steps"] for r in twin] == ["0", "30", "60"]
    learned = [k for k in ("updates", "loss", "policy_loss", "value_loss", "critic_loss") if k in uint8[-1]]
    assert learned and float(uint8[-1][learned[0]]) > 0  # the comparison covers learning, not only acting
    for a, b in zip(uint8, twin):
        assert a.keys() == b.keys()
        x, y = (np.array([float(r[k] or "nan") for k in a]) for r in (a, b))  # '' = not logged that row
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=f"row {a['env_steps']}")
