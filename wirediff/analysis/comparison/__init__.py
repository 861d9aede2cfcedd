"""Compare recorded exchanges: frames, shapes, pairs, divergences and conformance."""
