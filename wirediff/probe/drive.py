"""Run a whole probe: is the server there, and with which model?

Then every selected feature is sent, graded and put in the matrix, with each known client's
readiness.

The first request is the models feature's `GET /v1/models`: its answer says whether an
OpenAI-style API is there at all (else `ServerAbsent`, one line) and, without `--model`,
which model to probe (the first it lists).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from wirediff._support import clip
from wirediff._types import Record
from wirediff.analysis.comparison.breaks import server_words
from wirediff.analysis.diagnosis.chains import redirect_location
from wirediff.errors import ServerAbsent, UsageError
from wirediff.probe.expect import content_type, part
from wirediff.probe.features import Feature, ProbeData, load_probe
from wirediff.probe.grade import Graded, grade
from wirediff.probe.matrix import ClientRow, FeatureRow, feature_row, readiness
from wirediff.probe.send import send_records
from wirediff.record.store import iter_records
from wirediff.replay.output import Writers
from wirediff.replay.targets import Target, default_label
from wirediff.replay.wire import CONNECT_FAILED

__all__ = ["SESSION", "ProbeResult", "kept_files", "probe", "result_summary", "select"]

SESSION = "wirediff-probe"
"""The bundled session's name (its records' `session`)."""
MODELS = "models"
"""The id of the feature whose request goes first."""
CONCURRENCY = 4
"""Requests a probe has in flight at once, after the models request."""
Progress = Callable[[Feature, int, int], None]
"""A callback given `(feature, done, total)` when all of a feature's exchanges are recorded."""


@dataclass
class ProbeResult:
    url: str
    label: str
    model: str
    embedding_model: str
    rows: list[FeatureRow]
    clients: list[ClientRow]
    records: list[Record]
    """The probe's own records (`replay_of`: the bundled original), in the order sent."""
    graded: Graded
    seconds: dict[str, float] = field(default_factory=dict)
    strict: bool = False

    @property
    def passed(self) -> bool:
        return not any(r.fails(self.strict) for r in self.rows)


def select(data: ProbeData, only: Sequence[str]) -> list[Feature]:
    """Select the features `--only` names, all when none, in the bundle's order."""
    known = [f.id for f in data.features]
    unknown = [f for f in only if f not in known]
    if unknown:
        raise UsageError(f"--only: unknown feature {', '.join(unknown)}; known: {', '.join(known)}")
    return [f for f in data.features if not only or f.id in only]


def _model_ids(rec: Record) -> list[str] | None:
    body = part(rec, "response").get("body")
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _absent(rec: Record, target: Target, key_env: str | None) -> str | None:
    """Say why the server is not there to probe, from the answer to `GET /v1/models`."""
    err = part(rec, "error")
    resp = rec.get("response")
    where = target.shown
    if resp is None:
        message = str(err.get("message") or "")
        kind, said = err.get("kind"), clip(message, 200)
        if kind == "tls":
            return f"TLS failed with {where}: {said}"
        if kind == "upstream_protocol":
            return f"{where} does not speak HTTP: {said}"
        if kind == "upstream_disconnect":
            return f"{where} took the connection and closed it without an answer: {said}"
        if kind == "timeout" and not message.startswith(CONNECT_FAILED):
            return f"{where} took the connection and did not answer in time: {said}"
        return f"{where} is unreachable: {said}"
    status = resp.get("status")
    if status in (401, 403):
        said = server_words(rec) or "no reason given"
        if key_env is None:
            return f"{where} wants a key ({status}): give it with --api-key-env VAR ({said})"
        return f"{where} refused the key in ${key_env} ({status}: {said})"
    return None


def _not_openai(rec: Record, target: Target) -> str:
    resp = part(rec, "response")
    location = redirect_location(rec)
    if location is not None:
        to = urljoin(str(part(rec, "request").get("url") or ""), location)
        said = f"{target.shown} redirects: GET /models answered {resp.get('status')} to {clip(to, 200)}"
        if not urlsplit(to).path.endswith("/models"):  # a login page, say: no API behind it
            return f"{said}, not a list of models; give --model to probe the redirect"
        return (
            f"{said}. Clients follow it, but turn a POST into a GET on 301, 302 and 303: probe "
            f"{clip(to.removesuffix('/models'), 200)} for the server behind it, or give --model "
            "to probe the redirect"
        )
    if isinstance(resp.get("body"), dict):  # an API, without a model list
        said = server_words(rec) or "no list"
        return (
            f"{target.shown} lists no models (GET /models answered {resp.get('status')}: "
            f"{clip(said, 120)}); give --model"
        )
    return (
        f"{target.shown} does not look like an OpenAI-style API: GET /models answered "
        f"{resp.get('status')} ({content_type(rec)}), not a list of models; give --model to "
        "probe it anyway"
    )


def probe(
    url: str,
    *,
    api_key: str | None = None,
    api_key_env: str | None = None,
    model: str | None = None,
    embedding_model: str | None = None,
    only: Sequence[str] = (),
    timeout: float = 60.0,
    strict: bool = False,
    progress: Progress | None = None,
    keep: Path | None = None,
) -> ProbeResult:
    """Probe the server at `url`, an SDK's base URL, `…/v1`.

    With `keep`, its records are appended there as they are made (`kept_files`), with the
    bundled originals they replay, beside those of other servers probed there; a folder that
    holds an earlier probe's records of this server is refused. A probe that finds no server
    to probe (`ServerAbsent`) keeps nothing there, so that it can be run again as it was."""
    data = load_probe()
    features = select(data, only)
    target = Target(label=default_label(url), url=url)
    records: dict[str, Record] = {}
    t0 = time.monotonic()
    wanted = {i for f in (data.feature(MODELS), *features) for i in f.exchanges}
    writers = None
    made: list[Path] = []  # what this probe made for `keep`: its files, then its folders
    if keep is not None:
        originals, probed = kept_files(keep, target.label)
        if probed.exists():  # a probe is a fresh run, not a resume: the earlier one is kept
            raise UsageError(
                f"--keep {keep}: {probed.name} holds an earlier probe's records of this server; "
                "name another folder"
            )
        made = [p for p in (probed, originals) if not p.exists()]
        folder = keep
        while not folder.exists() and folder != folder.parent:
            made.append(folder)
            folder = folder.parent
        writers = Writers([originals, probed])

    def sink(rec: Record) -> None:
        records[str(rec["replay_of"])] = rec
        if writers is not None:
            writers.write(probed, rec)

    try:
        models = data.feature(MODELS)
        send_records(
            [data.by_id[i] for i in models.exchanges], target, api_key, timeout=timeout,
            concurrency=1, sink=sink,
        )  # fmt: skip
        first = records[models.exchanges[0]]
        try:
            model, embedding_model = _models(first, target, api_key_env, model, embedding_model)
        except ServerAbsent:
            if writers is not None:
                writers.close()
                for path in made:
                    with contextlib.suppress(OSError):
                        if path.is_dir():
                            path.rmdir()
                        else:
                            path.unlink()
            raise
        if writers is not None:  # the originals serve every server probed there: each once
            kept = {str(r["id"]) for r in iter_records(originals)}
            for rec in data.records:
                if str(rec["id"]) in wanted - kept:
                    writers.write(originals, rec)
        to_send: dict[str, Record] = {}
        for f in features:
            for i in f.exchanges:
                if i not in records:
                    to_send[i] = data.by_id[i]
        bad_key = {i for f in features if f.bad_key for i in f.exchanges}
        mapped = Target(
            label=target.label, url=url, model_map=_model_map(data, model, embedding_model)
        )
        pending = {f.id: set(f.exchanges) - set(records) for f in features}
        done = [0]

        def sink_all(rec: Record) -> None:
            sink(rec)
            for f in features:
                left = pending[f.id]
                if left and str(rec["replay_of"]) in left:
                    left.discard(str(rec["replay_of"]))
                    if not left:
                        tell(f)

        def tell(f: Feature) -> None:
            done[0] += 1
            if progress is not None:
                progress(f, done[0], len(features))

        for f in features:
            if not pending[f.id]:
                tell(f)
        send_records(
            list(to_send.values()), mapped, api_key, bad_key=bad_key, timeout=timeout,
            concurrency=CONCURRENCY, sink=sink_all,
        )  # fmt: skip
        t_sent = time.monotonic()
        sent = [records[i] for i in data.by_id if i in wanted and i in records]
        graded = grade(sent)
        rows = [feature_row(f, [records.get(i) for i in f.exchanges], graded) for f in features]
        by_id = {r.id: r for r in rows}
        clients = readiness(data.clients, by_id, strict=strict)
        seconds = {"send": t_sent - t0, "grade": time.monotonic() - t_sent}
        return ProbeResult(
            url, target.label, model, embedding_model, rows, clients, sent, graded, seconds, strict
        )
    finally:
        if writers is not None:
            writers.close()


def _models(
    first: Record, target: Target, key_env: str | None, model: str | None, embedding: str | None
) -> tuple[str, str]:
    """Choose the models to probe from the server's model list, `first`, unless given.

    A server that is absent, or no OpenAI-style API, or lists none, is `ServerAbsent`."""
    why = _absent(first, target, key_env)
    if why is not None:
        raise ServerAbsent(why)
    listed = _model_ids(first)
    if model is None:
        if listed is None:
            raise ServerAbsent(_not_openai(first, target))
        if not listed:
            raise ServerAbsent(f"{target.shown} lists no model at GET /models; give --model")
        model = listed[0]
    embeds = [m for m in listed or () if "embed" in m.lower()]
    return model, embedding or (embeds[0] if embeds else model)


def kept_files(keep: Path, label: str) -> tuple[Path, Path]:
    """Name where `--keep DIR` puts the bundled originals sent and the probe's records of them.

    The records go in `<session>.<label>.jsonl`, as `wirediff replay` names a replay."""
    return keep / f"{SESSION}.jsonl", keep / f"{SESSION}.{label}.jsonl"


def _model_map(data: ProbeData, model: str, embedding_model: str) -> dict[str, str]:
    """Map every model the bundle names to the probed one, embedding models to `embedding_model`."""
    out = {"*": model}
    for rec in data.records:
        body = (rec.get("request") or {}).get("body")
        name = body.get("model") if isinstance(body, dict) else None
        if isinstance(name, str) and part(rec, "tags").get("family") == "embeddings":
            out[name] = embedding_model
    return out


def result_summary(result: ProbeResult) -> dict[str, Any]:
    """Summarise the probe as JSON: the `probe` object of summary.json."""
    return {
        "url": result.url,
        "label": result.label,
        "model": result.model,
        "embedding_model": result.embedding_model,
        "strict": result.strict,
        "passed": result.passed,
        "features": [  # a row's fields but `whose`, which the matrix reads
            {f.name: getattr(r, f.name) for f in fields(r) if f.name != "whose"}
            for r in result.rows
        ],
        "clients": [
            {
                "id": c.id,
                "name": c.name,
                "ready": c.ready,
                "state": c.state,
                "blocking": c.blocking,
                "needs": c.needs,
                "untested": c.untested,
            }
            for c in result.clients
        ],
        "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
    }
