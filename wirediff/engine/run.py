"""The analysis as partition functions: scan, then compare partitions and diagnose batches of
failing chains on an engine, merging results as they come (`Partial.merge`, the chains'
merge), every row that tables list spilled to disk, and the index on disk too
(`columns.Columns`, a file a column, in pieces) — so memory holds a piece or a bucket of
the columns a step reads while it runs and the tasks in flight, never the captures.

    scan      chunks of each file (or a dataset's files) → the index (`index.build_index`)
    noise     the first repeats of each repeated request → its noise (one task)
    compare   partitions: originals with all their replays → `Partial` (+ finding rows)
    chains    linked once over the index, as positions, among the rows that can have a
              link (they may span sessions: two proxies' hops; `chaining`)
    diagnose  batches of whole failing chains → named from their records, diagnosed →
              diagnosis rows (+ the report's chain groups)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd

from wirediff._support import task_gc
from wirediff.analysis.comparison.pairing import Baseline
from wirediff.analysis.diagnosis.explain import BACKEND_SCAN, answered_prefixes, backend_key
from wirediff.analysis.diagnosis.subject import Served
from wirediff.engine import plan, tasks
from wirediff.engine.chaining import BATCH_INPUTS, chain_batch, failing_chains
from wirediff.engine.columns import Columns, bucket_of
from wirediff.engine.engines import Call, Calls, Engine
from wirediff.engine.index import Index, build_index, give_back, lean
from wirediff.engine.plan import NO_LINKS, ByContent, noise_samples
from wirediff.engine.progress import Progress
from wirediff.engine.scan import chunks, plain
from wirediff.engine.sources import PARQUET, Source, resolve
from wirediff.engine.spill import Spill
from wirediff.record.keys import digest
from wirediff.reports.hops import ChainCounts, merge_chains
from wirediff.reports.partial import Partial

__all__ = [
    "Diagnosed",
    "compare",
    "content_pairing",
    "diagnose",
    "failing_chains",
    "fetch",
    "locators",
    "scan_inputs",
    "total_bytes",
]

PART_BYTES = 48 << 20
"""Bytes of records a comparison partition holds, about: its memory is a few times that."""
BATCH_RECORDS = 4000
"""Records of the failing chains one diagnosis task reads, about."""


def locators(frame: pd.DataFrame, rows: np.ndarray | Sequence[int] | None = None) -> tasks.Locators:
    part = frame if rows is None else frame.iloc[np.asarray(rows, dtype=np.int64)]
    return (part["src"].tolist(), part["a"].tolist(), part["b"].tolist())


SMALL_BYTES = 64 << 20
"""Less than this to scan, and a local engine scans in this process."""


def scan_inputs(
    engine: Engine,
    args: Sequence[str],
    progress: Progress,
    *,
    retried: bool = False,
    scoped: bool = False,
) -> Index:
    """Every record of the inputs, indexed; failed replay attempts tried again left out
    (over all the inputs, as loading them together does; with `scoped`, within each
    argument, as `check` loads each capture on its own), unless `retried`."""
    from wirediff.engine import parquet

    sources: list[Source] = []
    scopes: list[int] = []
    for scope, found in enumerate(resolve(args, scoped=scoped)):
        sources += found
        scopes += [scope if scoped else 0] * len(found)
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
    scans, pieces, order = [], Columns(), []
    for _, result in engine.run(_scan, [((fn, a), {}) for fn, a in calls], small=small):
        bar.done(1, len(result.frame))
        if len(result.frame):  # on disk as it comes: never every chunk's rows at once
            pieces.append(result.frame)
            order.append((result.src, result.start))
        result.frame = _NOTHING
        scans.append(result)
    bar.close()
    index = build_index(sources, scopes, scans, pieces, order, retried=retried)
    give_back()
    return index


_NOTHING = pd.DataFrame()


def _scan(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    with task_gc():
        return lean(fn(*args))


def content_pairing(
    engine: Engine, index: Index, requested: str | None
) -> tuple[Baseline, ByContent]:
    """`plan.content_pairing`, the exchanges it found unmatched named by their ids."""
    chosen, found = plan.content_pairing(index, requested)
    if len(found.unmatched):
        names = _names(engine, index, found.unmatched["id"].tolist())
        found.unmatched["id"] = [names[d] for d in found.unmatched["id"].tolist()]
    give_back()
    return chosen, found


FETCHED = 2000
"""Records one task reads to name ids."""


def _names(engine: Engine, index: Index, digests: Sequence[int]) -> dict[int, str]:
    """The id of each of these id digests (read from the records)."""
    where = _where(index, digests)
    calls: list[Call] = [
        ((index.sources, locators(where.iloc[i : i + FETCHED])), {})
        for i in range(0, len(where), FETCHED)
    ]
    out: dict[int, str] = {}
    for _, records in engine.run(tasks.fetch, calls, small=len(calls) < 3):
        out.update((digest(r["id"]), r["id"]) for r in records)
    return out


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
    links: np.ndarray = NO_LINKS,
) -> Partial:
    """Every partition (about `part_bytes` of records) compared and merged; finding rows
    into `spill` when given. `links`: the originals paired by content over all the captures
    (`content_pairing`, by id digest), each compared in its baseline original's partition."""
    sources = index.sources
    total = total_bytes(index)
    count = max(1, math.ceil(total / part_bytes))
    if engine.workers > 1 and total > SMALL_BYTES:
        count = max(count, engine.workers)
    noise = _noise(engine, index, links)
    give_back()
    link_part = bucket_of(links[:, 1], count).tolist()
    links_of: dict[int, list[tuple[int, int, int]]] = {}
    for n, (cand, base) in enumerate(links.tolist()):
        links_of.setdefault(link_part[n], []).append((cand, base, n))
    by_part = plan.split(index, count, ["src", "a", "b", "request_digest", "careful"], links)
    give_back()

    def call(i: int) -> Call:  # made as a worker takes it: one partition's rows read
        part = by_part.read(i)
        rows, requests = part["row"], part["request_digest"]
        mine = {int(r): noise[int(r)] for r in np.unique(requests).tolist() if int(r) in noise}
        kwargs = {
            "ignore": tuple(ignore),
            "noise": mine,
            "links": links_of.get(by_part.parts[i], []),
            "max_examples": max_examples,
            "report": report,
            "rows": spill is not None,
            "spill_to": spill.directory if spill is not None and engine.shares_disk else None,
            "careful": part["careful"].tolist(),
        }
        where = (part["src"], part["a"], part["b"])
        return (sources, where, rows), kwargs

    merged = Partial(max_examples)
    try:
        calls = Calls(len(by_part.parts), call)
        bar = progress.phase("compare", len(index), "ex", len(calls))
        for _, result in engine.run(tasks.compare_part, calls):
            merged.merge(result.part)
            if result.spilled is not None and spill is not None:
                spill.add_findings_file(*result.spilled)
            elif spill is not None:
                spill.add_findings(result.rows)
            bar.done(1, result.exchanges)
    finally:
        by_part.close()
    bar.close()
    give_back()
    return merged


def total_bytes(index: Index) -> int:
    """Bytes of every record, a piece at a time."""
    return sum(int(f["nbytes"].sum()) for _, f in index.pieces("nbytes"))


def _noise(engine: Engine, index: Index, links: np.ndarray) -> dict[int, set[str]]:
    samples = noise_samples(index, links)
    if not samples:
        return {}
    read = [r for _, rows in samples for r in rows]
    where = index.load("src", "a", "b", rows=np.asarray(read, dtype=np.int64))
    starts = np.cumsum([0, *(len(rows) for _, rows in samples)]).tolist()
    work = [
        (request, locators(where.iloc[starts[k] : starts[k + 1]]))
        for k, (request, _) in enumerate(samples)
    ]
    noise: dict[int, set[str]] = {}
    calls: list[Call] = [((index.sources, work[i : i + 200]), {}) for i in range(0, len(work), 200)]
    for _, found in engine.run(tasks.learn_noise, calls, small=len(work) < 200):
        noise.update(found)
    return noise


@dataclass
class Diagnosed:
    chains: ChainCounts = field(default_factory=dict)
    rows: int = 0


def _served(index: Index) -> Served:
    """`wirediff.analysis.diagnosis.explain.served_by`, from the index."""
    rows = [np.zeros(0, dtype=np.int64)]
    prefixes: dict[str, set[str]] = {}
    for start, asked in index.pieces(
        "endpoint", "method", "status", "label", "family", "prefix", "soft_error"
    ):
        hit = (
            (asked["endpoint"] == "/v1/models")
            & (asked["method"] == "GET")
            & (asked["status"].fillna(0) == 200)
        )
        rows.append(start + np.flatnonzero(hit.to_numpy(dtype=bool)))
        for label, found in answered_prefixes(asked).items():
            prefixes.setdefault(label, set()).update(found)
    listed = index.load("label", "models", rows=np.concatenate(rows))
    out: dict[str, set[str]] = {}
    for label, models in zip(listed["label"].tolist(), listed["models"].tolist(), strict=True):
        if isinstance(models, str):  # as JSON (`lean`)
            out.setdefault(str(label), set()).update(orjson.loads(models))
    return Served(out, prefixes)


def _backends(engine: Engine, index: Index) -> dict[tuple[Any, Any], Any]:
    """Each backend's provider from its first `BACKEND_SCAN` exchanges (`Backends`)."""
    codes = (  # by category: no string a row
        (f["label"].cat.codes.to_numpy(), f["listener"].cat.codes.to_numpy())
        for _, f in index.pieces("label", "listener")
    )
    shape = (len(index.categories("label")), len(index.categories("listener")))
    heads = plan.first_rows(codes, shape, BACKEND_SCAN)
    head = plain(index.load("label", "listener", rows=heads), ["label", "listener"])
    where = index.load("src", "a", "b", rows=heads)
    keys = map(backend_key, head["label"].tolist(), head["listener"].tolist())
    first: dict[tuple[Any, Any], list[int]] = {}
    for k, key in enumerate(keys):
        first.setdefault(key, []).append(k)
    work = [(key, locators(where, at)) for key, at in first.items()]
    known: dict[tuple[Any, Any], Any] = {}
    for _, found in engine.run(tasks.providers, [((index.sources, work), {})], small=True):
        known.update(found)
    return known


def diagnose(
    engine: Engine,
    index: Index,
    progress: Progress,
    *,
    report: bool = True,
    spill: Spill | None,
) -> Diagnosed:
    """Every failing chain diagnosed, in batches; rows into `spill`."""
    failing = failing_chains(index, BATCH_RECORDS)
    give_back()
    out = Diagnosed()
    if not failing.count:
        return out
    served = _served(index)
    known = _backends(engine, index)
    batches = plan.pieces_of(index, [rows for _, rows, _ in failing.batches], BATCH_INPUTS)
    give_back()

    def call(i: int) -> Call:
        first, _, links = failing.batches[i]
        part = pd.DataFrame({name: batches.piece(name, i) for name in batches.names})
        batch = chain_batch(part, links)
        _, at = np.unique(batch.ids, return_index=True)
        read = np.sort(at)
        spill_to = spill.directory if spill is not None and engine.shares_disk else None
        args = (index.sources, batch, locators(part, read), served, known, first, report)
        return (*args, spill_to), {"careful": part["careful"].to_numpy()[read].tolist()}

    calls = Calls(len(failing.batches), call)
    bar = progress.phase("diagnose", failing.count, "chains", len(calls))
    try:
        for i, result in engine.run(tasks.diagnose_batch, calls, small=len(calls) < 3):
            first = failing.batches[i][0]
            if spill is not None and result.spilled is not None:
                spill.add_diagnoses_file(first, *result.spilled)
            elif spill is not None:
                spill.add_diagnoses(first, result.rows, result.lines)
            out.rows += result.spilled[2] if result.spilled is not None else len(result.rows)
            merge_chains(out.chains, result.chains)
            bar.done(1, result.count)
    finally:
        batches.close()
    bar.close()
    return out


def _where(index: Index, digests: Sequence[int] | np.ndarray) -> pd.DataFrame:
    """The locators of the records with these id digests, in index order."""
    wanted = np.unique(np.asarray(digests, dtype=np.uint64))
    rows = [
        start + np.flatnonzero(np.isin(f["id_digest"].to_numpy(dtype=np.uint64), wanted))
        for start, f in index.pieces("id_digest")
    ]
    return index.load("src", "a", "b", rows=np.concatenate(rows) if rows else np.zeros(0, int))


def fetch(engine: Engine, index: Index, ids: Sequence[str]) -> Mapping[str, Any]:
    """The records with these ids."""
    if not ids:
        return {}
    wanted = np.fromiter((digest(i) for i in ids), dtype=np.uint64, count=len(ids))
    out: dict[str, Any] = {}
    calls: list[Call] = [((index.sources, locators(_where(index, wanted))), {})]
    named = set(ids)
    for _, records in engine.run(tasks.fetch, calls, small=True):
        for rec in records:
            if rec["id"] in named:
                out[rec["id"]] = rec
    return out
