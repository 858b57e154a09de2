"""``--install``: the final meta-Nash mixture of the opponent side as a mixture opponent file, with a card.

Rule: the Nash (``solvers.nash``, LP) of the final payoff table, whatever meta-solver the run used, for the
opponent side (battle red, adversarial pursuit predators); members with weight <= ``MIN_WEIGHT`` are left
out and the rest renormalised. Written into the destination folder (default ``experiments/opponents/``):
``<env>.mixture.json`` (``suPER.opponents.mixture`` format, read by ``--opponent PATH``), its members as
``<env>.mixture/<policy>.safetensors`` and ``<env>.mixture.card.md``. The shipped single-team opponent
``<env>.safetensors`` (``--opponent pretrained``) is not touched: replacing it changes the paper grid's
opponent and needs evidence that the new team is stronger (docs/population.md).
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

import numpy as np

from suPER.opponents import sha256
from suPER.opponents.mixture import Member, write_mixture
from suPER.population.config import RANDOM
from suPER.population.loop import Population
from suPER.population.payoff import PayoffTable, play_match
from suPER.population.solvers import nash
from suPER.runs import atomic_write_bytes, atomic_write_text

MIN_WEIGHT = 1e-6
"""members of the installed mixture have at least this weight"""


def install(pop: Population, dest: Path, command: str) -> dict[str, Any]:
    """Write the final meta-Nash mixture of ``pop``'s opponent side into ``dest`` (module docstring).

    Returns:
        dict with mixture (path), card (path), members (name -> weight), vs_random (match summary).
    """
    cfg, env = pop.cfg, pop.cfg.env
    table = PayoffTable.load(pop.payoff_path)
    team, opp = list(pop.members("team", cfg.iterations)), list(pop.members("opponent", cfg.iterations))
    u_IJ = table.matrix(team, opp)
    x_I, y_J = nash(u_IJ)
    keep = [(name, float(w)) for name, w in zip(opp, y_J) if w > MIN_WEIGHT]
    total = sum(w for _, w in keep)
    dest = Path(dest)
    member_dir = dest / f"{env}.mixture"
    members = []
    for name, w in keep:
        if name == RANDOM:
            members.append(Member(name, RANDOM, w / total))
            continue
        data = Path(pop.members("opponent", cfg.iterations)[name]).read_bytes()
        target = member_dir / f"{name.replace('/', '_')}.safetensors"
        atomic_write_bytes(target, lambda tmp, data=data: Path(tmp).write_bytes(data))
        members.append(Member(name, str(target.relative_to(dest)), w / total))
    mixture = dest / f"{env}.mixture.json"
    write_mixture(mixture, env, members)
    seed = cfg.seed + 30_000
    vs_random = play_match(pop.env_cfg, RANDOM, str(mixture), cfg.eval_episodes, seed)
    rows = "\n".join(
        f"| `{m.policy}` | {m.weight:.3f} | `{m.file}` | "
        f"{'-' if m.file == RANDOM else '`' + sha256(dest / m.file)[:16] + '...`'} | "
        f"{table.entries[(RANDOM, m.policy)]['loss_rate']:.2f} |" for m in members)
    value = float(x_I @ u_IJ @ y_J)
    card = dest / f"{env}.mixture.card.md"
    atomic_write_text(card, f"""# Opponent mixture: {env} ({pop.side_name['opponent']} side)

A mixture of frozen {pop.side_name['opponent']} teams from a population run ({cfg.method}, meta-solver
`{cfg.solver}`); as an opponent it plays one member per episode, drawn with these weights (seeded: see
`suPER/opponents/mixture.py`). Use it with `--opponent {mixture}`.

Rule: the Nash equilibrium (linear programming) of the final payoff table's meta-game, opponent side;
members of weight <= {MIN_WEIGHT:g} left out. Meta-game payoff: the team's win rate minus its loss rate;
game value at this Nash {value:+.3f} (team's point of view).

| member | weight | file | sha256 | win rate vs random team (table) |
|---|---|---|---|---|
{rows}

Mixture vs a uniformly random team: win rate {vs_random['loss_rate']:.2f} [{vs_random['loss_lo']:.2f},
{vs_random['loss_hi']:.2f}] (95% Wilson) over {vs_random['episodes']} greedy episodes from seed {seed}; its
return {vs_random['opponent_return']:.2f} [{vs_random['opponent_return_lo']:.2f}, {vs_random['opponent_return_hi']:.2f}].

| | |
|---|---|
| population run | `{pop.folder}` ({cfg.iterations} iterations, {cfg.br_steps} env steps per best response, sides {', '.join(cfg.sides)}, relay {'on' if cfg.relay else 'off'}, seed {cfg.seed}) |
| payoff entries | {cfg.eval_episodes} greedy episodes each |
| overrides | `{cfg.overrides}` |
| machine | {socket.gethostname()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared), torch threads {cfg.threads} |

```
{command}
```
""")
    return {"mixture": mixture, "card": card, "members": {m.policy: m.weight for m in members},
            "vs_random": vs_random, "weights_sum": float(np.sum([m.weight for m in members]))}
