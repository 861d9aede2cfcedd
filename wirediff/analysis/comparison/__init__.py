"""Comparison: frames, shapes, pairs, divergences and conformance of recorded exchanges."""
