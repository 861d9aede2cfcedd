"""Run the analysis of whole captures on this machine's cores or on a Dask cluster.

The engine's workers scan the captures into the index, which the command then analyses as
one table (`wirediff.analysis.index`); it also writes the captures as a Parquet dataset
(`wirediff export`). `wirediff.engine.run.Run` is what the commands use."""

import os

import pyarrow

# Arrow's strings (pandas' `str`) from the C allocator, in the command and on every worker
# (each imports this package), unless ARROW_DEFAULT_MEMORY_POOL chooses: mimalloc, Arrow's
# default, keeps what a task freed for the next, so a worker's memory is a partition's
# frames and what the ones before it left.
if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
