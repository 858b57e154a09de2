"""Replay buffers."""

from suPER.replay.compact import CellCodec, CompactPER, ObsCodecError, load_replay_state
from suPER.replay.per import Batch, MultiAgentPER
from suPER.replay.uniform import UniformReplay

__all__ = ["Batch", "CellCodec", "CompactPER", "MultiAgentPER", "ObsCodecError", "UniformReplay", "load_replay_state"]
