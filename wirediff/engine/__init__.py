"""The analysis beyond one process: the captures scanned into an index, compared in
partitions (each original with all its replays) and diagnosed in batches of failing chains,
on this machine's cores (`--engine local`) or a Dask cluster (`--engine dask`), the results
merged as they come; and the captures as a Parquet dataset (`wirediff export`).

`wirediff.engine.commands.Run` is what the commands use."""
