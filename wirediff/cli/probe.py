"""Run `wirediff probe URL`: is this server compatible, and which clients will work on it?

Usage:
    wirediff probe URL [--api-key-env VAR] [--model M] [--embedding-model M]
        [--only FEATURE,...] [-o report.html] [--json FILE] [--junit FILE] [--strict]
        [--keep DIR] [--timeout S]

Sends the bundled probe session — requests real clients sent (openai-python, openai-node,
Codex CLI, LangChain, LlamaIndex, the OpenAI Agents SDK, the Vercel AI SDK) — to the server
at URL (an SDK's base URL, `…/v1`) through the replayer's engine and recorder, and grades
every answer with no baseline: conformance to OpenAI's OpenAPI document, the SDK's types and
Open Responses, the stream grammars, severity by client impact, and the diagnoses of what
failed. Prints one row per feature (`pass`, `deviation`, `breaking`, `unsupported`, with its
evidence) and one per known client (READY or NOT READY, with the features that stop it).

The model is the first one `GET /models` lists, unless `--model` names one (embeddings use
the first listed model with `embed` in its name, or `--embedding-model`). The key is read
from `$VAR` (`--api-key-env`), never from the command line; the bad-key feature sends a key
no server has. `--keep DIR` keeps the records: `DIR/wirediff-probe.jsonl` (the bundled
originals, answered by the reference) and `DIR/wirediff-probe.<host:port>.jsonl` (the
probe's, as a replay of them), for `wirediff report`, `replay` and `check` like any capture.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from wirediff._support import plural, printable
from wirediff.cli.check import write_junit
from wirediff.cli.inputs import distinct_outputs, key_from_env, on_stdout
from wirediff.cli.runner import (
    EXIT_ERROR,
    EXIT_FOUND,
    EXIT_OK,
    exit_codes,
    folder,
    seconds,
    standalone,
)
from wirediff.errors import UsageError

if TYPE_CHECKING:  # the probe and the report are imported when the command runs
    import pandas as pd

    from wirediff.probe.drive import ProbeResult
    from wirediff.probe.features import Feature

__all__ = ["main_probe", "register", "terminal_matrix"]

DEFAULT_TIMEOUT = 60.0
EVIDENCE = 110
"""Characters of evidence on a terminal row."""


def terminal_matrix(result: ProbeResult) -> list[str]:
    """Render the feature rows, the client rows and the closing count for the terminal."""
    from wirediff.probe.matrix import STATUSES

    width = max(len(r.id) for r in result.rows) if result.rows else 10
    lines = [f"probe of {result.url} (model {result.model})", "features:"]
    for r in result.rows:
        evidence = r.evidence if len(r.evidence) <= EVIDENCE else r.evidence[: EVIDENCE - 1] + "…"
        lines.append(f"  {r.status:<11} {r.id:<{width}}  {evidence}")
    lines.append("clients:")
    name_width = max(len(c.name) for c in result.clients) if result.clients else 10
    for c in result.clients:
        why = f"  stopped by {', '.join(c.blocking)}" if c.blocking else ""
        note = f"  ({len(c.untested)} of its needs not probed)" if c.untested else ""
        lines.append(f"  {c.state:<11} {c.name:<{name_width}}{why}{note}".rstrip())
    counts = ", ".join(f"{sum(1 for r in result.rows if r.status == s)} {s}" for s in STATUSES)
    verdict = "passed" if result.passed else "failed"
    lines.append(f"{plural(len(result.rows), 'feature')}: {counts} — {verdict}")
    return lines


def _base_url(url: str) -> str:
    """Return the server's base URL, as a client would be given it.

    One without a path is noted: an SDK's base URL usually ends in `/v1`."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise UsageError(f"not a URL: {url!r} ({e})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"not an http(s) URL: {url!r}")
    if not parsed.path.strip("/"):
        note = f"wirediff: note: {url} has no path; an SDK base_url usually ends in /v1"
        print(note, file=sys.stderr)
    return url.rstrip("/")


def _only(given: list[str] | None) -> list[str]:
    """Read the features `--only` names, each time it is given; given, it names one at least."""
    named = [f.strip() for text in given or () for f in text.split(",") if f.strip()]
    if given is not None and not named:
        raise UsageError("--only: no feature named; leave --only out to probe them all")
    return named


def junit_frame(result: ProbeResult) -> pd.DataFrame:
    """Frame the features as `write_junit` reads verdict rows: one testcase per feature."""
    import pandas as pd

    return pd.DataFrame(
        {
            "label": [result.label] * len(result.rows),
            "role": ["candidate"] * len(result.rows),
            "family": [r.id for r in result.rows],
            "transport": ["http"] * len(result.rows),
            "verdict": [r.status for r in result.rows],
            "reasons": [r.problems or [r.evidence] for r in result.rows],
            "fails": [r.fails(result.strict) for r in result.rows],
            "fails_on": [[] for _ in result.rows],
            "breaking": [_count(r.problems, "breaking") for r in result.rows],
            "deviations": [_count(r.problems, "deviation") for r in result.rows],
            "cosmetic": [0] * len(result.rows),
            "exchanges": [len(r.exchanges) for r in result.rows],
        }
    )


def _count(problems: list[str], severity: str) -> int:
    return sum(1 for p in problems if p.startswith(f"{severity}: "))


def cmd_probe(args: argparse.Namespace) -> int:
    from wirediff.probe.drive import kept_files, probe
    from wirediff.replay.targets import default_label
    from wirediff.reports.model import build
    from wirediff.reports.render import render_html, write_summary

    url = _base_url(args.url)
    given = {"-o": args.output, "--json": args.json, "--junit": args.junit}
    distinct_outputs([], given)
    if args.keep:  # the records kept are written first: an output there would replace them
        kept = {os.path.realpath(p) for p in kept_files(Path(args.keep), default_label(url))}
        for option, out in given.items():
            if out and out != "-" and os.path.realpath(out) in kept:
                raise UsageError(f"{option} {out}: where --keep keeps the records; name another")
    key = key_from_env(args.api_key_env)
    for option, model in (("--model", args.model), ("--embedding-model", args.embedding_model)):
        if model is not None and not model.strip():
            raise UsageError(f"{option}: empty; name a model, or leave it out for the first listed")
    lines = sys.stderr if on_stdout(given) else sys.stdout

    def progress(f: Feature, done: int, total: int) -> None:
        print(f"probe: [{done:>2}/{total}] {f.id}", file=sys.stderr, flush=True)

    result = probe(
        url,
        api_key=key,
        api_key_env=args.api_key_env,
        model=args.model,
        embedding_model=args.embedding_model,
        only=_only(args.only),
        timeout=args.timeout,
        strict=args.strict,
        progress=progress,
        keep=Path(args.keep) if args.keep else None,
    )
    for line in terminal_matrix(result):
        print(printable(line), file=lines)
    if args.output or args.json:
        model = build(result.graded.analysis, result.graded.diagnosed)
        model.probe = result
        if args.output:
            path = render_html(model, args.output)
            if args.output != "-":
                print(f"report: {path}", file=lines)
        if args.json:
            written = write_summary(model, args.json)
            if args.json != "-":
                print(f"summary: {written}", file=lines)
    if args.junit:
        junit = write_junit(junit_frame(result), args.junit, "wirediff probe")
        if args.junit != "-":
            print(f"junit: {junit}", file=lines)
    if args.keep:
        print(f"records: {args.keep}", file=lines)
    return EXIT_OK if result.passed else EXIT_FOUND


def register(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="probe a server with real client traffic: a feature matrix and client readiness",
        description="\n\n".join((__doc__ or "").split("\n\n")[2:]),
        epilog=exit_codes(
            {
                EXIT_OK: "every probed feature passes (or only deviates, without --strict)",
                EXIT_FOUND: "a feature is breaking or unsupported (or deviates, with --strict)",
                EXIT_ERROR: "bad usage, or no server to probe: unreachable, TLS failed, not "
                "HTTP, not an OpenAI-style API, or the key refused (one line says which)",
            }
        ),
    )
    p.add_argument("url", metavar="URL", help="the server's base URL, as an SDK's base_url (…/v1)")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the key")
    p.add_argument("--model", metavar="M", help="the model to probe (default: the first listed)")
    p.add_argument(
        "--embedding-model",
        metavar="M",
        help="the model for embeddings (default: the first listed with `embed` in its name, "
        "else --model)",
    )
    p.add_argument("--only", metavar="FEATURE,…", action="append", help="probe only these features")
    p.add_argument(
        "-o", "--output", metavar="report.html", help="write the HTML report (`-`: stdout)"
    )
    p.add_argument("--json", metavar="FILE", help="write summary.json with the probe (`-`: stdout)")
    p.add_argument(
        "--junit", metavar="FILE", help="write JUnit XML, one testcase per feature (`-`: stdout)"
    )
    p.add_argument("--strict", action="store_true", help="deviations fail too")
    p.add_argument("--keep", metavar="DIR", type=folder, help="keep the probe's records in DIR")
    p.add_argument(
        "--timeout",
        type=seconds(),
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds per exchange (default {DEFAULT_TIMEOUT:.0f})",
    )
    p.set_defaults(func=cmd_probe)


def main_probe(argv: list[str] | None = None) -> int:
    """Run `wirediff probe …` on its own, for tests and `python -m wirediff.cli.probe`."""
    return standalone(register, "probe", argv)


if __name__ == "__main__":
    sys.exit(main_probe())
