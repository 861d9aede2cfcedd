"""The stand-ins deviate from the spec only as their profiles say.

The `openai` stand-in is spec-clean (see test_conformance); lmstudio, ollama and vllm each
encode a real server's known deviations in `wirediff/profiles/<name>.yaml`. Every finding the
three references raise on their traffic (the demo's: captured through mitmdump with the openai
SDK, then replayed) must be explained by a difference between that profile and openai's:

- a key finding (missing, null, wrong type): the key differs between the two profiles' sections
  for the family (`chat`/`responses`, their `streaming` section, `answers`, `error_shape`);
- a stream-grammar finding: the streaming flag it is about differs (`GRAMMAR_FLAGS`);
- a route the profile does not list: its `answers.unknown_endpoint`;
- an SDK-harness finding: the consequence of an explained finding on the same exchange.

A finding nothing explains means a stand-in drifted from the server it stands in for.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.e2e.test_demo import run_demo
from wirediff._types import Record
from wirediff.analysis.index.analyze import analyze
from wirediff.cli.demo import CANDIDATES
from wirediff.profiles import profile
from wirediff.record.store import load_records

pytestmark = pytest.mark.e2e

SECTIONS = {
    "chat.completions": (("chat",), ("streaming", "chat"), ("answers",), ("error_shape",)),
    "responses": (("responses",), ("streaming", "responses"), ("answers",), ("error_shape",)),
}
"""Where a family's keys are described in a profile."""
PROFILE_KEY_NAMES = {"tool_strict_default": "strict"}
"""Profile settings named otherwise than the wire key they decide."""
GRAMMAR_FLAGS = {"events[chunk.usage]": ("streaming", "chat", "usage_chunk")}
"""A stream-grammar finding's path, and the profile flag that decides it."""


def leaves(value: Any, path: tuple[str, ...] = ()) -> Iterable[tuple[tuple[str, ...], Any]]:
    """`(path, value)` of every leaf; a list of plain names counts each name as a key."""
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            yield from leaves(v, (*path, str(k)))
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        for name in value:
            yield (*path, name), True
    else:
        yield path, json.dumps(value, sort_keys=True)


def section(prof: Mapping[str, Any], where: tuple[str, ...]) -> Any:
    for key in where:
        prof = prof.get(key) or {} if isinstance(prof, Mapping) else {}
    return prof


def differing_keys(name: str, family: str) -> set[str]:
    """Key names the profile `name` sets otherwise than openai's for `family`."""
    out: set[str] = set()
    for where in SECTIONS[family]:
        mine = set(leaves(section(profile(name), where)))
        theirs = set(leaves(section(profile("openai"), where)))
        for path, _ in mine ^ theirs:
            out.update(PROFILE_KEY_NAMES.get(k, k) for k in path)
    return out


def flag_differs(name: str, where: tuple[str, ...]) -> bool:
    return bool(section(profile(name), where) != section(profile("openai"), where))


def listed(name: str, method: str, path: str) -> bool:
    """The profile serves this route (a `{…}` segment matches any one segment)."""
    for ep in profile(name).get("endpoints") or []:
        pattern = re.sub(r"\\\{[^/]*\\\}", "[^/]+", re.escape(ep["path"]))
        if ep["method"] == method and re.fullmatch(pattern, path):
            return True
    return False


def leaf_key(path: str) -> str:
    return re.sub(r"\[.*?\]", "", path.rsplit(".", 1)[-1])


def unexplained(records: list[Record]) -> list[str]:
    """The candidates' findings their profiles do not explain, one line each."""
    found = analyze(records).conformance
    by_id = {r["id"]: r for r in records}
    found = found[found["label"] != "openai"]
    explained: dict[Any, bool] = {}
    for i, row in found.iterrows():
        name, family, rec = row["label"], row["family"], by_id[row["candidate_id"]]
        request = rec["request"]
        if not listed(name, request["method"], request["path"].split("?", 1)[0]):
            explained[i] = "unknown_endpoint" in (profile(name).get("answers") or {})
        elif row["path"] in GRAMMAR_FLAGS:
            explained[i] = flag_differs(name, GRAMMAR_FLAGS[row["path"]])
        elif row["kind"] == "conformance":
            explained[i] = leaf_key(row["path"]) in differing_keys(name, family)
    judged = pd.Series(explained, dtype=bool).reindex(found.index)
    by_exchange = judged.groupby(found["candidate_id"]).transform("any")
    ok = judged.fillna(by_exchange).astype(bool)  # a harness finding: a consequence, or not
    return sorted(
        {f"{r.label} {r.family} {r.kind} `{r.path}`: {r.message}" for r in found[~ok].itertuples()}
    )


@pytest.fixture(scope="module")
def demo_records(tmp_path_factory: pytest.TempPathFactory) -> list[Record]:
    out = tmp_path_factory.mktemp("profiles") / "demo"
    proc = run_demo(out)
    assert proc.returncode == 0, proc.stderr
    captures = [out / "captures" / "demo.jsonl"]
    captures += [out / "captures" / f"demo.{label}.jsonl" for label in CANDIDATES]
    return load_records([Path(p) for p in captures])


def test_every_finding_on_a_stand_in_is_one_its_profile_describes(
    demo_records: list[Record],
) -> None:
    labels = {r["label"] for r in demo_records}
    assert labels == {"openai", *CANDIDATES} and set(CANDIDATES) == {"lmstudio", "ollama", "vllm"}
    found = analyze(demo_records).conformance
    # the candidates do deviate (the check has something to explain), openai does not
    assert set(found["label"]) == set(CANDIDATES)
    assert unexplained(demo_records) == []


def test_a_deviation_no_profile_describes_is_caught(demo_records: list[Record]) -> None:
    """An lmstudio chat answer without `created` (which every profile keeps) is named."""
    records = copy.deepcopy(demo_records)
    chat = next(
        r
        for r in records
        if r["label"] == "lmstudio"
        and r["tags"]["family"] == "chat.completions"
        and not r["tags"]["stream"]
        and r["response"] is not None
        and isinstance(r["response"]["body"], dict)
    )
    assert chat["response"] is not None and isinstance(chat["response"]["body"], dict)
    del chat["response"]["body"]["created"]
    missed = unexplained(records)
    assert missed and all(
        m.startswith("lmstudio chat.completions conformance `created`: `created`: ") for m in missed
    ), missed
