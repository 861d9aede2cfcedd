"""The report's list of captures counts exchanges by numbers, the strings of each distinct
label, session and client made once; on random indexes (missing sessions, an empty one
beside a missing one, clients that say one identity with two user agents) it lists exactly
what counting by the strings of every exchange lists."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pandas as pd
import pytest

from wirediff.record.tags import SDK_FIELDS
from wirediff.reports.captures import Capture, Client, _identity, captures_of
from wirediff.reports.formatters import redact


def by_strings(ex: pd.DataFrame) -> dict[str, list[Capture]]:
    """The oracle: a string per exchange and column, grouped as they are."""
    of = ex["replay_of"]
    frame = pd.DataFrame(
        {
            "label": ex["label"].astype(str).to_numpy(),
            "session": ex["session"].astype("str").fillna("").to_numpy(),
            "replayed": (of.notna() & (of != "")).to_numpy(),
            "client": ex["client"].astype(str).to_numpy(),
        }
    )
    keys = ["label", "session", "replayed"]
    sizes = frame.groupby(keys, sort=False).size()
    clients = frame.groupby([*keys, "client"], sort=False)
    seen: dict[tuple[Any, ...], list[tuple[int, Client]]] = {k: [] for k in sizes.index}
    for (*key, said), n, first in zip(
        clients.size().index.tolist(),
        clients.size().tolist(),
        clients.head(1).index.tolist(),
        strict=True,
    ):
        sdk = {
            k: redact(v) if isinstance(v, str) else v
            for k, v in zip(SDK_FIELDS, json.loads(said), strict=True)
        }
        client = Client({k: v for k, v in sdk.items() if v is not None}, n)
        same = next((c for _, c in seen[tuple(key)] if _identity(c.sdk) == _identity(sdk)), None)
        if same is None:
            seen[tuple(key)].append((first, client))
        else:
            same.exchanges += n
    out: dict[str, list[Capture]] = {}
    for (label, session, replayed), n in zip(sizes.index.tolist(), sizes.tolist(), strict=True):
        ranked = sorted(seen[(label, session, replayed)], key=lambda fc: (-fc[1].exchanges, fc[0]))
        out.setdefault(label, []).append(
            Capture(label, session, bool(replayed), int(n), [c for _, c in ranked])
        )
    for caps in out.values():
        caps.sort(key=lambda c: (c.replayed, -c.exchanges, c.session))
    return out


def _client(rng: random.Random) -> str:
    said: dict[str, str | None] = dict.fromkeys(SDK_FIELDS)
    said["lang"] = rng.choice(["python", "js", None])
    said["user_agent"] = rng.choice(["OpenAI/Python 2.54.0", "OpenAI/Python 2.54.0 x", "curl/8"])
    return json.dumps([said[k] for k in SDK_FIELDS])


def index(seed: int) -> pd.DataFrame:
    rng = random.Random(seed)
    n = rng.randrange(1, 60)
    sessions = pd.Categorical(
        [rng.choice(["s1", "s2", "", None]) for _ in range(n)], categories=["s2", "", "s1"]
    )
    return pd.DataFrame(
        {
            "label": pd.array([rng.choice(["openai", "ollama"]) for _ in range(n)], dtype="str"),
            "session": sessions,
            "replay_of": pd.array([rng.choice(["", "x", None]) for _ in range(n)], dtype="str"),
            "client": pd.Categorical([_client(rng) for _ in range(n)]),
        },
        index=np.arange(n),
    )


@pytest.mark.parametrize("seed", range(200))
def test_captures_counted_by_numbers_are_those_counted_by_strings(seed: int) -> None:
    ex = index(seed)
    assert captures_of(ex) == by_strings(ex)
