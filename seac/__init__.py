"""SEAC (Shared Experience Actor-Critic, Christianos et al., NeurIPS 2020) on the suite's envs: ``seac.trainer.train``."""
