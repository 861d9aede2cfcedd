"""The analysis as partition functions: scan, then compare partitions and diagnose batches of
failing chains on an engine, merging results as they come (`Partial.merge`, the chains'
merge), every row that tables list spilled to disk — so memory holds the index and the
partitions in flight, never the captures.

    scan      chunks of each file (or a dataset's files) → the index (`plan.build_index`)
    noise     the first repeats of each repeated request → its noise (one task)
    compare   partitions: originals with all their replays → `Partial` (+ finding rows)
    chains    built once over the index (they may span sessions: two proxies' hops)
    diagnose  batches of failing chains → diagnosis rows (+ the report's chain groups)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wirediff._support import task_gc
from wirediff.analysis.diagnosis.chains import chain_rows_from
from wirediff.analysis.diagnosis.diagnose import BACKEND_SCAN
from wirediff.engine import tasks
from wirediff.engine.engines import Call, Engine
from wirediff.engine.plan import (
    Index,
    build_index,
    content_pairing,
    noise_samples,
    partition_of,
    partitions,
    root_digests,
)
from wirediff.engine.progress import Progress
from wirediff.engine.scan import chunks, plain
from wirediff.engine.sources import PARQUET, Source, resolve
from wirediff.engine.spill import Spill
from wirediff.record.keys import digest
from wirediff.reports.chains import ChainCounts, merge_chains
from wirediff.reports.partial import Partial

__all__ = [
    "Diagnosed",
    "compare",
    "content_pairing",
    "diagnose",
    "failing_chains",
    "fetch",
    "locators",
    "partitions",
    "root_digests",
    "scan_inputs",
]

PART_BYTES = 48 << 20
"""Bytes of records a comparison partition holds, about: its memory is a few times that."""
BATCH_RECORDS = 4000
"""Records of the failing chains one diagnosis task reads, about."""
CHAIN_INPUTS = [
    "id",
    "session",
    "label",
    "listener",
    "replay_of",
    "started",
    "duration_ms",
    "retry",
    "method",
    "path",
    "url",
    "status",
    "error_kind",
    "family",
    "soft_error",
    "model",
    "prefix",
    "sdk_lang",
    "sdk_version",
    "auth_fingerprint",
]
"""The index columns `chain_rows_from` reads."""


def locators(frame: pd.DataFrame, rows: np.ndarray | Sequence[int] | None = None) -> tasks.Locators:
    part = frame if rows is None else frame.iloc[np.asarray(rows, dtype=np.int64)]
    return (part["src"].tolist(), part["a"].tolist(), part["b"].tolist())


SMALL_BYTES = 64 << 20
"""Less than this to scan, and a local engine scans in this process."""


def scan_inputs(
    engine: Engine, args: Sequence[str], progress: Progress, *, retried: bool = False
) -> Index:
    """Every record of the inputs (each argument a scope), indexed; failed replay attempts
    tried again left out, unless `retried`."""
    from wirediff.engine import parquet

    sources: list[Source] = []
    scopes: list[int] = []
    for scope, found in enumerate(resolve(args)):
        sources += found
        scopes += [scope] * len(found)
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    for src, start, end in chunks(sources):
        calls.append((tasks.scan, (sources, src, start, end)))
    for src, source in enumerate(sources):
        if source.kind == PARQUET:
            calls += [(parquet.scan_file, (sources, src, f)) for f in range(len(source.files))]
    small = (
        not any(s.kind == PARQUET for s in sources) and sum(s.size for s in sources) < SMALL_BYTES
    )
    bar = progress.phase("scan", None, "ex", len(calls))
    scans = []
    for _, result in engine.run(_call, [((fn, a), {}) for fn, a in calls], small=small):
        scans.append(result)
        bar.done(1, len(result.frame))
    bar.close()
    return build_index(sources, scopes, scans, retried=retried)


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    with task_gc():
        return fn(*args)


def compare(
    engine: Engine,
    index: Index,
    progress: Progress,
    *,
    ignore: Sequence[str] = (),
    max_examples: int,
    report: bool = True,
    spill: Spill | None = None,
    part_bytes: int = PART_BYTES,
    links: Sequence[tuple[str, str]] = (),
) -> Partial:
    """Every partition (about `part_bytes` of records) compared and merged; finding rows
    into `spill` when given. `links`: the originals paired by content over all the captures
    (`content_pairing`), each compared in its baseline original's partition."""
    frame, sources = index.frame, index.sources
    total = int(frame["nbytes"].sum()) if len(frame) else 0
    count = max(1, math.ceil(total / part_bytes))
    if engine.workers > 1 and total > SMALL_BYTES:
        count = max(count, engine.workers)
    noise = _noise(engine, index, links)
    part_of = partitions(frame, count, links) if count > 1 else np.zeros(len(frame), dtype=np.int64)
    link_part = partition_of(
        np.fromiter((digest(b) for _, b in links), dtype=np.uint64, count=len(links)), count
    )
    links_of: dict[int, list[tuple[str, str, int]]] = {}
    for n, ((cand, base), p) in enumerate(zip(links, link_part.tolist(), strict=True)):
        links_of.setdefault(p, []).append((cand, base, n))
    requests = frame["request_digest"].to_numpy()
    deep = frame["deep"].to_numpy(dtype=bool)
    calls: list[Call] = []
    for p in range(count):
        rows = np.flatnonzero(part_of == p)
        if not len(rows):
            continue
        mine = {
            int(r): noise[int(r)] for r in np.unique(requests[rows]).tolist() if int(r) in noise
        }
        kwargs = {
            "ignore": tuple(ignore),
            "noise": mine,
            "links": links_of.get(p, []),
            "max_examples": max_examples,
            "report": report,
            "rows": spill is not None,
            "spill_to": spill.directory if spill is not None and engine.shares_disk else None,
            "shallow": not bool(deep[rows].any()),
        }
        part = frame.iloc[rows]  # arrays, not lists: a million positions held until sent
        where = (part["src"].to_numpy(), part["a"].to_numpy(), part["b"].to_numpy())
        calls.append(((sources, where, rows), kwargs))
    merged = Partial(max_examples)
    bar = progress.phase("compare", len(frame), "ex", len(calls))
    for _, result in engine.run(tasks.compare_part, calls):
        merged.merge(result.part)
        if result.spilled is not None and spill is not None:
            spill.add_findings_file(*result.spilled)
        elif spill is not None:
            spill.add_findings(result.rows)
        bar.done(1, result.exchanges)
    bar.close()
    return merged


def _noise(engine: Engine, index: Index, links: Sequence[tuple[str, str]]) -> dict[int, set[str]]:
    samples = noise_samples(index.frame, links)
    if not samples:
        return {}
    work = [(request, locators(index.frame, rows)) for request, rows in samples]
    noise: dict[int, set[str]] = {}
    calls: list[Call] = [((index.sources, work[i : i + 200]), {}) for i in range(0, len(work), 200)]
    for _, found in engine.run(tasks.learn_noise, calls, small=len(work) < 200):
        noise.update(found)
    return noise


@dataclass
class Diagnosed:
    chains: ChainCounts = field(default_factory=dict)
    rows: int = 0


def _served(frame: pd.DataFrame) -> dict[str, set[str]]:
    """`wirediff.analysis.diagnosis.diagnose.served_models`, from the index."""
    hit = frame[
        (frame["endpoint"] == "/v1/models")
        & (frame["method"] == "GET")
        & (frame["status"].fillna(0) == 200)
    ]
    out: dict[str, set[str]] = {}
    for label, models in zip(hit["label"].tolist(), hit["models"].tolist(), strict=True):
        if isinstance(models, (list, tuple, np.ndarray)):
            out.setdefault(str(label), set()).update(models)
    return out


def _backends(engine: Engine, index: Index) -> dict[tuple[Any, Any], Any]:
    """Each backend's provider from its first `BACKEND_SCAN` exchanges (`Backends`)."""
    frame = index.frame
    backend = plain(frame, ["label", "listener"])
    rank = backend.groupby(["label", "listener"], dropna=False, sort=False).cumcount()
    heads = np.flatnonzero(rank.to_numpy() < BACKEND_SCAN)
    head = backend.take(heads)
    keys = zip(head["label"].tolist(), head["listener"].tolist(), strict=True)
    first: dict[tuple[Any, Any], list[int]] = {}
    for i, key in zip(heads.tolist(), keys, strict=True):
        first.setdefault(key, []).append(i)
    work = [(key, locators(frame, rows)) for key, rows in first.items()]
    known: dict[tuple[Any, Any], Any] = {}
    for _, found in engine.run(tasks.providers, [((index.sources, work), {})], small=True):
        known.update(found)
    return known


def failing_chains(index: Index) -> list[tuple[Any, ...]]:
    """`chain_rows(..., failing_only=True)` over the whole index."""
    frame = index.frame
    if not len(frame):
        return []
    body = frame["body_digest"].tolist()
    return chain_rows_from(
        frame[CHAIN_INPUTS],  # a copy of what chains read (categories as they are)
        frame["hop_digest"].tolist(),
        [loc if isinstance(loc, str) else None for loc in frame["location"].tolist()],
        frame["ok"].tolist(),
        body.__getitem__,
        failing_only=True,
    )


def diagnose(
    engine: Engine,
    index: Index,
    progress: Progress,
    *,
    report: bool = True,
    spill: Spill | None,
) -> Diagnosed:
    """Every failing chain diagnosed, in batches; rows into `spill`."""
    chains = failing_chains(index)
    out = Diagnosed()
    if not chains:
        return out
    served = _served(index.frame)
    known = _backends(engine, index)
    wanted = {i for chain in chains for i in chain[1]}
    places = np.flatnonzero(index.frame["id"].isin(wanted).to_numpy())
    row_of = dict(zip(index.frame["id"].take(places).tolist(), places.tolist(), strict=True))
    calls: list[Call] = []
    batch: list[tuple[Any, ...]] = []
    ids: list[str] = []
    first = 0
    for n, chain in enumerate(chains):
        batch.append(chain)
        ids += chain[1]
        if len(ids) >= BATCH_RECORDS or n == len(chains) - 1:
            rows = np.array([row_of[i] for i in dict.fromkeys(ids)], dtype=np.int64)
            args = (index.sources, batch, locators(index.frame, rows), served, known, first, report)
            calls.append((args, {}))
            first, batch, ids = n + 1, [], []
    bar = progress.phase("diagnose", len(chains), "chains", len(calls))
    for i, result in engine.run(tasks.diagnose_batch, calls, small=len(calls) < 3):
        if spill is not None:
            spill.add_diagnoses(calls[i][0][5], result.rows, result.texts)
        out.rows += len(result.rows)
        merge_chains(out.chains, result.chains)
        bar.done(1, result.count)
    bar.close()
    return out


def fetch(engine: Engine, index: Index, ids: Sequence[str]) -> Mapping[str, Any]:
    """The records with these ids (the last of each id, as loading keeps it by id)."""
    if not ids:
        return {}
    frame = index.frame
    rows = np.flatnonzero(frame["id"].isin(list(ids)).to_numpy())
    out: dict[str, Any] = {}
    calls: list[Call] = [((index.sources, locators(frame, rows)), {})]
    for _, records in engine.run(tasks.fetch, calls, small=True):
        for rec in records:
            out[rec["id"]] = rec
    return out
