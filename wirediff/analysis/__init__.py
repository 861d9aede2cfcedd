"""Compare and diagnose recorded exchanges with pandas.

`wirediff.analysis.comparison` comes first, `wirediff.analysis.diagnosis` builds on it."""
