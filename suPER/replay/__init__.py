"""Replay buffers."""

from suPER.replay.per import Batch, MultiAgentPER
from suPER.replay.uniform import UniformReplay

__all__ = ["Batch", "MultiAgentPER", "UniformReplay"]
