"""The generic run loop, its backends and checkpoints: the same for every algorithm (see docs/algorithms.md)."""

from privcvx.runtime.backends import (
    BACKEND_OPTIONS,
    BACKENDS,
    AgentHost,
    ProcessBackend,
    Ray,
    RayBackend,
    SerialBackend,
    make_backend,
)
from privcvx.runtime.loop import run

__all__ = ["BACKENDS", "BACKEND_OPTIONS", "AgentHost", "ProcessBackend", "Ray", "RayBackend", "SerialBackend",
           "make_backend", "run"]
