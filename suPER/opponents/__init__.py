"""Fixed network opponents, split by job.

In the paper the learning team (battle: blue; adversarial pursuit: prey) plays against a frozen,
pretrained opponent team (red; predators) of per-agent DDQN policies with the learners' network
(REFERENCE section 8). The original's weights were never published, so this project trains its own
(``suPER.selfplay``) and ships them as ``experiments/opponents/<env>.safetensors`` with a card.

- ``team_file``: the team weights format (safetensors + metadata, the original's pickle, run checkpoints)
- ``policy``: a network team acting greedily / epsilon-greedily, batched (``NetworkOpponent``, ``team_policy``)
- ``match``: K seeded episodes of a team against an env's opponent, with outcome and CI statistics
- ``mixture``: a mixture of frozen teams as an opponent (``<name>.mixture.json``, population training's strategies)
- ``build``: the env with its opponent team (``make_env``, ``make_batch``, ``make_eval_batch``, ``check_opponent``):
  the one builder of every trainer, evaluation and match
"""

from suPER.envs.factory import has_network_opponent
from suPER.opponents.build import check_opponent, make_batch, make_env, make_eval_batch, random_team_return
from suPER.opponents.match import MATCH_BATCH, MatchResult, final_games, mean_ci, outcomes, play, wilson
from suPER.opponents.policy import NetworkOpponent, team_policy
from suPER.opponents.team_file import (
    FORMAT,
    FORMAT_VERSION,
    OPPONENTS_DIR,
    UNUSED_REFERENCE_PARAMS,
    OpponentFileError,
    TeamMeta,
    inspect_team,
    load_original_pickle,
    load_team,
    opponent_path,
    save_team,
    sha256,
    team_from_checkpoint,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MATCH_BATCH",
    "OPPONENTS_DIR",
    "UNUSED_REFERENCE_PARAMS",
    "MatchResult",
    "NetworkOpponent",
    "OpponentFileError",
    "TeamMeta",
    "check_opponent",
    "final_games",
    "has_network_opponent",
    "load_original_pickle",
    "inspect_team",
    "load_team",
    "make_batch",
    "make_env",
    "make_eval_batch",
    "mean_ci",
    "opponent_path",
    "outcomes",
    "play",
    "random_team_return",
    "save_team",
    "sha256",
    "team_from_checkpoint",
    "team_policy",
    "wilson",
]
