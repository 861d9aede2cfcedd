"""The analysis beyond one process: the captures scanned into an index, compared in
partitions (each original with all its replays) and diagnosed in batches of failing chains,
on this machine's cores (`--engine local`) or a Dask cluster (`--engine dask`), the results
merged as they come; and the captures as a Parquet dataset (`wirediff export`).

`wirediff.engine.commands.Run` is what the commands use."""

import os

import pyarrow

# Arrow's strings (pandas' `str`) from the C allocator, in the command and on every worker
# (each imports this package), unless ARROW_DEFAULT_MEMORY_POOL chooses: mimalloc, Arrow's
# default, keeps what a task freed for the next, so a worker's memory is a partition's
# frames and what the ones before it left.
if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
