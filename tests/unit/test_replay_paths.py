"""A recorded path is a path only: what a replay or a mirror builds from it stays on the
target's origin and under its base path, or the record is skipped with the reason."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from tests.fixtures.crafted_paths import crafted_paths, portless_paths
from tests.fixtures.records import error_of
from tests.fixtures.replay_records import mock, rec
from wirediff._types import Record
from wirediff.errors import PlanError
from wirediff.replay.dry_run import dry_run
from wirediff.replay.paths import lenient, remove_dot_segments
from wirediff.replay.plan import make_plan
from wirediff.replay.request import prepare, rebase
from wirediff.replay.sender import TargetRun
from wirediff.replay.targets import Target, default_label

OTHER = 9
GOOD = Target("good", "http://127.0.0.1:8000/v1")
PORTLESS = Target("good", "http://127.0.0.1/v1")


def _crafted(paths: list[str]) -> list[Record]:
    """Each path as a GET and as a POST with a body."""
    return [
        r
        for i, p in enumerate(paths)
        for r in (rec(f"g{i}", "GET", p), rec(f"p{i}", "POST", p, body={"model": "m"}))
    ]


@pytest.mark.parametrize(
    ("target", "paths"),
    [(GOOD, crafted_paths(OTHER)), (PORTLESS, crafted_paths(OTHER) + portless_paths(OTHER))],
    ids=["port", "portless"],
)
def test_crafted_paths_are_skipped_with_their_reason_and_nothing_is_sent(
    target: Target, paths: list[str]
) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={})

    recs = _crafted(paths)
    plan = make_plan(recs, allow_unsafe=True)
    out: list[Record] = []
    run = TargetRun(plan, target, "sk-canary-key-000000", out.append, {}, concurrency=4)
    asyncio.run(run.run(mock(handler)))
    assert seen == []
    assert len(out) == len(recs)
    for r in out:
        err = error_of(r)
        assert err["kind"] == "skipped", r["replay_of"]
        assert err["message"].startswith("the captured path "), err["message"]
        assert r["request"]["url"] == target.base
    lines = list(dry_run(plan, [target], {"good": {}}, {}, {"good": 0}))
    assert f"0 to send, {len(recs)} to skip" in lines[0]
    assert sum(1 for line in lines if line.startswith("      skip: the captured path ")) == len(
        recs
    )


@pytest.mark.parametrize(
    ("path", "why"),
    [
        (f"@127.0.0.1:{OTHER}/x", "does not begin with '/'"),
        (f":{OTHER}/x", "does not begin with '/'"),
        (f"//127.0.0.1:{OTHER}/x", "begins with '//', which names a host"),
        ("/v1/x/..\\y", "holds a backslash"),
        ("/v1/models#frag", "holds '#'"),
        ("/v1/a\r\nHost: x", "holds '\\x0d'"),
        ("/v1/../../x", "leads to '/x', outside the target's base path '/v1'"),
        ("/v1/%2e%2e/x", "leads to '/x', outside"),
        ("/v1/..%2fx", "leads to '/x', outside"),
        ("/v1/%252e%252e/x", "leads to '/x', outside"),
        ("/v1/..;/x", "leads to '/x', outside"),
        ("/health", "leads to '/health', outside the target's base path '/v1'"),
    ],
)  # fmt: skip
def test_each_skip_says_why(path: str, why: str) -> None:
    with pytest.raises(PlanError, match="^the captured path .*" + re.escape(why)):
        rebase(path, GOOD, {})


@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("/v1/chat/completions", "http://127.0.0.1:8000/v1/chat/completions"),
        ("/v1/a/../chat/completions", "http://127.0.0.1:8000/v1/chat/completions"),
        ("/v1/./models", "http://127.0.0.1:8000/v1/models"),
        ("/v1/models/..", "http://127.0.0.1:8000/v1/"),
        # an encoded dot segment that stays under the base is sent as it came
        ("/v1/models/a/%2e%2e/b", "http://127.0.0.1:8000/v1/models/a/%2e%2e/b"),
        ("/v1/files/a%2Fb", "http://127.0.0.1:8000/v1/files/a%2Fb"),
        # `@` and `:` are path characters after the first `/`
        ("/v1/models/a@b:1", "http://127.0.0.1:8000/v1/models/a@b:1"),
        ("/v1/models/é", "http://127.0.0.1:8000/v1/models/%C3%A9"),
    ],
)  # fmt: skip
def test_paths_under_the_base_are_sent_as_httpx_sends_them(path: str, url: str) -> None:
    out = prepare(rec("a", "GET", path), GOOD, None, {})
    assert out.url == url
    assert str(httpx.Request("GET", out.url).url) == url


@pytest.mark.parametrize(
    ("minted", "url"),
    [
        ("resp_2", "http://127.0.0.1:8000/v1/responses/resp_2?include=resp_2"),
        ("a/b", "http://127.0.0.1:8000/v1/responses/a%2Fb?include=a%2Fb"),
        ("x?y#z", "http://127.0.0.1:8000/v1/responses/x%3Fy%23z?include=x%3Fy%23z"),
        ("../../../x", None),
        ("%2e%2e/%2e%2e/%2e%2e", None),
    ],
)  # fmt: skip
def test_an_id_the_target_minted_stays_in_its_segment(minted: str, url: str | None) -> None:
    path = "/v1/responses/resp_1?include=resp_1"
    if url is None:
        with pytest.raises(PlanError, match="outside the target's base path '/v1'"):
            rebase(path, GOOD, {"resp_1": minted})
    else:
        assert rebase(path, GOOD, {"resp_1": minted}) == url


@pytest.mark.parametrize(
    ("path", "out"),
    [
        # RFC 3986 §5.2.4 and §5.4.2
        ("/a/b/c/./../../g", "/a/g"),
        ("/../g", "/g"),
        ("/./g", "/g"),
        ("/g.", "/g."),
        ("/.g", "/.g"),
        ("/..g", "/..g"),
        ("/a/b/..", "/a/"),
        ("/a/b/.", "/a/b/"),
        ("/", "/"),
        ("", ""),
    ],
)  # fmt: skip
def test_remove_dot_segments(path: str, out: str) -> None:
    assert remove_dot_segments(path) == out


@pytest.mark.parametrize(
    ("path", "out"),
    [
        ("/v1/%2e%2e/x", "/x"),
        ("/v1/%252E%252E/x", "/x"),
        ("/v1/..%5cx", "/x"),
        ("/v1/..;jsessionid=1/x", "/x"),
        ("/v1//../x", "/x"),
        ("/v1/%2fx", "/v1/x"),
    ],
)  # fmt: skip
def test_lenient_reading(path: str, out: str) -> None:
    assert lenient(path) == out


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/v1",
        "http://127.0.0.1:0/v1",
        "http://127.0.0.1:-1/v1",
        "http://127.0.0.1:8o/v1",
        "http://[::1]:70000/v1",
        "http://u:p@127.0.0.1:65536/v1",
    ],
)
def test_a_port_out_of_range_is_one_line(url: str) -> None:
    with pytest.raises(PlanError, match=r"port '.*' of .* is not a number from 1 to 65535"):
        Target("t", url)
    with pytest.raises(PlanError, match=r"^port '.*' of .* is not a number from 1 to 65535$"):
        default_label(url)


@pytest.mark.parametrize(
    "url", ["http://h/v1", "http://h:1/v1", "http://[::1]:65535/v1", "http://h:/"]
)
def test_ports_in_range_are_taken(url: str) -> None:
    assert Target("t", url).url == url


def test_the_base_path_is_resolved() -> None:
    t = Target("t", "http://h:1/a/../v1/")
    assert (t.path, t.base) == ("/v1", "http://h:1/v1")
