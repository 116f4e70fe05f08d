"""Tests move time with the registry's own ManualClock (the job queue and services take any Clock)."""

from registry.clock import ManualClock

__all__ = ["ManualClock"]
