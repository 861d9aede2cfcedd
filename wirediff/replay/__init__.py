"""Replay captures: a pure plan of targets, safety, id slots and dependencies, then the engine."""
