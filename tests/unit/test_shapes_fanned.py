"""Work per distinct answer: the analysis checks each distinct reading of an answer once
and fans its findings back to every exchange that has it. On generated records (answers
whose words, ids, numbers, tool arguments and statuses vary, hostile values among them),
each exchange's and each pair's findings are exactly those its own records give when read
alone."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from typing import Any

import pandas as pd
import pytest

from tests.fixtures.records import (
    chat_record,
    events_of,
    openai_error,
    openai_session,
    payloads,
    replay,
    responses_record,
)
from wirediff._types import Record
from wirediff.analysis.comparison import impact
from wirediff.analysis.comparison.divergences import FINDING_COLUMNS
from wirediff.analysis.comparison.noise import pair_noise
from wirediff.analysis.comparison.pairing import text
from wirediff.analysis.comparison.reading import (
    Reading,
    answer_key,
    pair_findings,
    read_answer,
    reading_key,
)
from wirediff.analysis.comparison.shapes import (
    FREE_TEXT,
    NUMBERED_TEXT,
    VARYING_NUMBERS,
    known_structures,
)
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


def _reworded(value: Any, rng: random.Random, ids: dict[str, str]) -> Any:
    """`value` in other words: free text drawn anew (empty or not kept), each id renamed
    alike wherever it comes, times and token counts drawn anew."""
    if isinstance(value, list):
        return [_reworded(v, rng, ids) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if isinstance(item, str) and key in NUMBERED_TEXT:
            item = ids.setdefault(item, f"{item[:1]}{len(ids)}" if item else "")
        elif isinstance(item, str) and key in FREE_TEXT and key != "name" and item:
            item = rng.choice([w for w in WORDS if w]) * rng.randrange(1, 3)
        elif type(item) is int and (key in VARYING_NUMBERS or key.endswith("_tokens")):
            item = rng.randrange(1 << 40)
        out[key] = _reworded(item, rng, ids)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_records_of_one_answer_key_read_alike(seed: int) -> None:
    """The scan reads one record per `answer_key` and gives its reading to all that share
    the key: on records whose words, numbers, indices, flags and ids vary, any two with one
    key read alike, each read alone."""
    rng = random.Random(seed)
    records = generated(seed)
    for rec in records:  # answers in other words, some with another structure, value, flag
        if rec["response"] is not None and rng.random() < 0.7:
            rec["response"] = _reworded(rec["response"], rng, {})
        if rng.random() < 0.3:
            _varied(rec, rng)
    by_key: dict[tuple[Any, ...], list[tuple[int, str]]] = {}
    for rec in records:
        key = answer_key(rec)
        if key is not None:
            answer = json.dumps(rec["response"], sort_keys=True, default=str)
            by_key.setdefault(key, []).append((reading_key(alone(rec)), answer))
    varied = [group for group in by_key.values() if len({answer for _, answer in group}) > 1]
    assert len(varied) >= 5, "answers that differ share keys: the test tests"
    assert all(len({reading for reading, _ in group}) == 1 for group in by_key.values())


def _said_whole(rec: Record) -> Record:
    events_of(rec)[-1]["partial"] = False
    return rec


def _last_partial(rec: Record) -> None:
    events_of(rec)[-1]["partial"] = True


def _second_choice(rec: Record) -> None:
    payloads(rec)[1]["choices"][0]["index"] = 1


def _sequence_skipped(rec: Record) -> None:
    payloads(rec)[4]["sequence_number"] = 9


def _other_item(rec: Record) -> None:
    payloads(rec)[4]["item_id"] = "fc_other"


def _split_arguments(rec: Record) -> None:
    payloads(rec)[4]["delta"] = "town"


def _other_tool(rec: Record) -> None:
    assert rec["response"] is not None
    rec["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] = "f"


ONE_VALUE = [
    (lambda: _said_whole(chat_record(stream=True)), _last_partial),
    (lambda: chat_record(stream=True, tool=True), _second_choice),
    (lambda: responses_record(stream=True, tool=True), _sequence_skipped),
    (lambda: responses_record(stream=True, tool=True), _other_item),
    (lambda: responses_record(stream=True, tool=True), _split_arguments),
    (lambda: chat_record(tool=True), _other_tool),
]


@pytest.mark.parametrize(("make", "change"), ONE_VALUE, ids=[c.__name__ for _, c in ONE_VALUE])
def test_an_answer_key_keeps_each_value_a_check_reads(make: Any, change: Any) -> None:
    """A flag, an index, a sequence number, which item a piece belongs to, a piece of a
    call's arguments or a tool's name each change what the checks say of an answer, and so
    its key."""
    before, after = make(), make()
    change(after)
    assert reading_key(alone(before)) != reading_key(alone(after)), "the checks read it"
    assert answer_key(before) != answer_key(after)
