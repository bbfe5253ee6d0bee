"""The generic run loop, its backends and checkpoints: the same for every algorithm (see docs/algorithms.md)."""

from privcvx.runtime.backends import BACKENDS, AgentHost, ProcessBackend, SerialBackend, make_backend
from privcvx.runtime.loop import run

__all__ = ["BACKENDS", "AgentHost", "ProcessBackend", "SerialBackend", "make_backend", "run"]
