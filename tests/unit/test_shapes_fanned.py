"""Work per distinct answer: the analysis checks each distinct reading of an answer once
and fans its findings back to every exchange that has it. On generated records (answers
whose words, ids, numbers, tool arguments and statuses vary, hostile values among them),
each exchange's and each pair's findings are exactly those its own records give when read
alone."""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

import pandas as pd
import pytest

from tests.fixtures.records import openai_error, openai_session, replay
from wirediff._types import Record
from wirediff.analysis.comparison import impact
from wirediff.analysis.comparison.divergences import FINDING_COLUMNS
from wirediff.analysis.comparison.noise import pair_noise
from wirediff.analysis.comparison.pairing import text
from wirediff.analysis.comparison.reading import Reading, pair_findings, read_answer
from wirediff.analysis.comparison.shapes import known_structures
from wirediff.analysis.index.analyze import analyze

WORDS = ("sunny", "rain", "Paris", "Tokyo", "42", "", "\u2028", "<script>x</script>", "é" * 3)
NUMBERS: tuple[Any, ...] = (1 << 70, -0.0, 1e308, 0, 7)


def _mutate(value: Any, rng: random.Random) -> Any:
    """`value` with one leaf drawn anew, of its type or null: words (hostile ones among
    them), a number (past 64 bits, the largest double), a key gone."""
    if isinstance(value, dict) and value:
        key = rng.choice(sorted(value))
        roll = rng.random()
        if roll < 0.1:
            out = dict(value)
            del out[key]
            return out
        return {**value, key: _mutate(value[key], rng)}
    if isinstance(value, list) and value:
        at = rng.randrange(len(value))
        return [*value[:at], _mutate(value[at], rng), *value[at + 1 :]]
    if isinstance(value, str):
        if value.startswith("{"):  # tool arguments: JSON, or JSON no longer
            city = rng.choice(WORDS)
            return rng.choice([f'{{"city": "{city}"}}', '{"city": ', "{}"])
        return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3)))
    if isinstance(value, bool) or value is None:
        return rng.choice([True, False, None])
    if isinstance(value, int | float):
        return rng.choice([rng.randrange(1000), rng.random(), None, *NUMBERS])
    return None


def _varied(rec: Record, rng: random.Random) -> None:
    """Change `rec`'s answer in place: most often its words and numbers alone (a shape
    shared with others), sometimes its structure, its status or its error."""
    resp = rec["response"]
    if resp is None:
        return
    roll = rng.random()
    if roll < 0.1:
        resp["status"] = rng.choice([404, 500, 429])
        resp["body"], resp["events"] = openai_error(rng.choice(WORDS) or "x", "server_error"), None
        return
    for _ in range(rng.randrange(1, 4)):
        if resp.get("body") is not None:
            resp["body"] = _mutate(resp["body"], rng)
        events = resp.get("events") or []
        if events:
            ev = rng.choice(events)
            ev["data"] = (
                _mutate(ev["data"], rng) if isinstance(ev.get("data"), dict) else ev["data"]
            )


def generated(seed: int) -> list[Record]:
    """Copies of the reference session, each replayed to two labels, answers varied."""
    rng = random.Random(seed)
    records: list[Record] = []
    for copy_no in range(6):
        for base in openai_session():
            original = copy.deepcopy(base)
            original["id"] = f"{base['id']}-{copy_no}"
            original["seq"] = copy_no * 100 + int(base["seq"] or 0)
            if rng.random() < 0.3:
                _varied(original, rng)
            records.append(original)
            for label in ("ollama", "vllm"):
                records.append(
                    replay(
                        original,
                        id=f"{original['id']}-{label}",
                        label=label,
                        change=lambda r: _varied(r, rng) if rng.random() < 0.5 else None,
                    )
                )
    return records


def alone(rec: Record) -> Reading:
    """The reading of one record, nothing shared with any other."""
    with known_structures():
        impact.prepare([rec])
        return read_answer(rec)


def _rows(frame: pd.DataFrame, *ids: str) -> Counter[tuple[Any, ...]]:
    values = [frame[c].tolist() for c in (*ids, *FINDING_COLUMNS)]
    return Counter(zip(*values, strict=True))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_findings_of_each_distinct_reading_are_each_exchanges_own(seed: int) -> None:
    analysis = analyze(generated(seed))
    rows = analysis.index.rows
    records = analysis.index.read(range(len(rows)))
    readings = [alone(rec) for rec in records]
    assert len(analysis.index.readings) < len(records), "readings shared: the test tests"

    own: Counter[tuple[Any, ...]] = Counter()
    for rec, reading in zip(records, readings, strict=True):
        own.update((rec["id"], *row) for row in reading.rows)
    assert _rows(analysis.conformance, "candidate_id") == own

    pairs = analysis.pairs
    c, b = pairs["c"].to_numpy(), pairs["b"].to_numpy()
    part = pd.DataFrame(
        {
            "b": b,
            "c": c,
            "bid": b,
            "label": text(rows["label"]).to_numpy()[c],
            "baseline_label": text(rows["label"]).to_numpy()[b],
            "request": rows["request_digest"].to_numpy()[b],
        }
    )
    noise, sets = pair_noise(part, {k: r.observed for k, r in enumerate(readings)})
    paired: Counter[tuple[Any, ...]] = Counter()
    for k, (ci, bi) in enumerate(zip(c.tolist(), b.tolist(), strict=True)):
        found, said = pair_findings(readings[bi], readings[ci], sets[int(noise[k])])
        ids = (records[ci]["id"], records[bi]["id"])
        paired.update((*ids, *row) for row in (*found, *said))
    assert _rows(analysis.divergences, "candidate_id", "baseline_id") == paired


def test_an_index_sent_as_an_object_is_read_as_its_text() -> None:
    """Any JSON may come where an index is: a chat chunk's `choices[].index`, a Responses
    event's `content_index` as an object are read (and found), never a crash."""
    from tests.fixtures.records import chat_record, payloads, responses_record, set_payloads

    chat, responses = (
        chat_record(id="c", stream=True, tool=True),
        responses_record(id="r", stream=True),
    )
    for rec, where in ((chat, "choices"), (responses, "content_index")):
        changed = []
        for data in payloads(rec):
            if isinstance(data, dict) and where == "choices" and data.get("choices"):
                data["choices"][0]["index"] = {"a": 1}
            elif isinstance(data, dict) and where in data:
                data[where] = {"a": 1}
            changed.append(data)
        set_payloads(rec, changed, renumber=False)
    found = analyze([chat, responses]).conformance
    assert {"c", "r"} <= set(found["candidate_id"])
