"""Analyse whole captures over one table, the index.

Every record is read once into a row of the index (`row`); `kept` decides which rows an
analysis keeps; pairing, noise, divergences, conformance and diagnoses are then operations
over frames (`analyze`), the checks done once per distinct reading of an answer and the
results fanned back to the exchanges.

The in-memory analysis of a list of records and the engine's scan of files on many processes
build the same index with the same functions, and call the same rules on it."""
