"""Probe a server with a bundled session of real client traffic, graded with no baseline.

`wirediff probe` grades feature by feature (`features`), with each known client's readiness
(`clients`).

Layers, top down: `run` (send the session, grade it, the matrix) → `send` (the replayer's
engine, and `websocket` for the WebSocket mode) and `grade` (the analysis: conformance,
severity, grammars, diagnoses) → `matrix` (a status per feature, readiness per client) →
`expect` (what each feature's answer must show) → `features` (the bundled data, matching).
"""
