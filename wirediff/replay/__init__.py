"""Replay: a pure plan (targets, safety, id slots, dependencies), then the engine that sends it."""
