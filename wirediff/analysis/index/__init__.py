"""The analysis of whole captures over one table: every record read once into a row of the
index (`row`), what records an analysis keeps (`kept`), then pairing, noise, divergences,
conformance and diagnoses as operations over frames, with the checks done once per
distinct reading of an answer and the results fanned back to the exchanges (`whole`).

The in-memory analysis of a list of records and the engine's scan of files on many
processes build the same index with the same functions, and call the same rules on it."""
