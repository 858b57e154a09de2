"""Population training (PSRO, fictitious self-play, self-play) with SUPER-DDQN teams as learners.

Modules, one job each:

* ``solvers``: meta-solvers of the two-player zero-sum meta-game (registry ``META_SOLVERS``) and NashConv;
* ``payoff``: the payoff table between the two sides' policies (matches, CIs, ``payoff.csv``);
* ``mixture``: a mixture of frozen teams acting as the env's opponent, one member per episode;
* ``loop``: the best-response loop, its run folder and resume;
* ``figures``: payoff heatmap, meta-strategy and exploitability plots;
* ``cli``: the ``super-marl population`` commands.
"""
