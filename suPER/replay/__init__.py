"""Replay buffers."""

from suPER.replay.per import Batch, MultiAgentPER

__all__ = ["Batch", "MultiAgentPER"]
