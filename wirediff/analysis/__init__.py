"""Comparison and diagnosis of recorded exchanges (pandas): `wirediff.analysis.comparison`, then
`wirediff.analysis.diagnosis` on top of it."""
