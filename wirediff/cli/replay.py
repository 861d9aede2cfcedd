"""Re-send a recorded session to other backends, recorded like live traffic: `wirediff replay`.

Usage:
    wirediff replay CAPTURE... --to URL [--label L] [--api-key-env VAR] [--model-map A=B]...
        [--header K=V]... [--concurrency N] [--rate R/s] [--only FILTER]... [--dry-run]
        [--allow-unsafe] [--timeout S] [-o OUT] [--config wirediff.yaml]

Each exchange is sent with httpx and recorded by the code that records captured traffic
(streams split into events as they arrive), so replay records have exactly the shape of
captured ones, plus `replay_of` (the original's id) and `label` (the target). The order,
the ids carried from one answer to the next, filters and safety are settled before anything
is sent (`--dry-run` prints that plan).

Requests are re-based onto the target URL (the original path after its API prefix; a path
no known route matches is cut after the prefix its session's known routes use, and one
outside it is kept whole: `/v1/ask_url` → `<URL>/ask_url`, `/health` → `http://host:port/health`
when the URL has no path); a query in the target URL (Azure's `?api-version=…`) is sent on
every request, after the original's. A recorded path is a path only: one that does not begin
with a single `/`, holds a backslash, `#`, a space or a control character, or leads outside
the target URL's path (`/v1/../x`, `/v1/%2e%2e/x`, `/health` with `--to …/v1`), as sent or
as a lenient server decodes it, is recorded as skipped with the reason and sent nowhere. The model is mapped (`--model-map A=B`, `*=B` for all),
the auth header is replaced by the key in `$VAR` (`--api-key-env`; never from the command
line or the capture, which holds only fingerprints) and the other headers pass through,
except the transport's own (host, content-length, connection, transfer-encoding, …, and
content-encoding: the body is sent decoded), cookies and wirediff's control headers.
Headers and key-like query parameters (`key`, `api_key`, `token`, …) that the capture holds
only as fingerprints are not sent (`--dry-run` lists them; `--header K=V` sets a header).

Ids are remapped: a step that continues an earlier answer (`previous_response_id`, a
`function_call_output`'s `call_id`, a chat `tool` message's `tool_call_id`,
`/v1/responses/{id}…`) is sent after it, carrying the id the *target* returned. When the
target's answer leaves nothing to continue (an error, no function call), the step is
recorded as skipped (`response: null`, `error.kind: "skipped"`, the reason) and not sent.
Only reads and generation endpoints are replayed by default; DELETE, uploads, batches and
other state-changing calls are recorded as skipped unless `--allow-unsafe`. So is an
original whose request cannot be sent again (a malformed or truncated body), with the reason.

Output: `<capture dir>/<session>.<label>.jsonl` per session (or `-o OUT` for everything),
append-only and flushed per record. Running the same command again resumes: originals
already recorded for that label in the output are not sent again (delete the output to
replay afresh), except those whose newest record got no answer (`error.kind`
upstream_unreachable, tls, timeout, upstream_disconnect) or was skipped for a reason that no
longer holds (e.g. now with `--allow-unsafe`): they are tried again and the new record is
appended. The newest record per original and label is the one that counts. Ctrl-C stops
cleanly (exit 130); a request then in flight is recorded as `interrupted` (the target may
have received it) and is sent again by the next run: at least once, never silently twice,
since a repeated attempt's record says which attempt it is (`"attempt": 2`). Exit 2: bad
usage or input, or a target where every request failed at the transport (no answer:
unreachable, timed out, cut before a status; the records are kept).

`--only` (repeatable; a record is replayed if it matches any of them) is a comma-separated
list of `KEY=GLOB` or `KEY!=GLOB` terms that must all match; keys: family, endpoint, method,
path, stream (true/false), model, id, session, listener, label. E.g. `--only
family=responses,stream=true`, `--only endpoint=/v1/chat/completions`, `--only method!=GET`.
What a selected exchange depends on (the response it continues, the call it answers) is
replayed with it. A two-hop capture (client → gateway → backend, one listener per hop)
holds every call twice: the inner hop (on another listener than the session's first
record, inside a call asking the same thing) is not replayed, with a note, unless a filter
names a listener or a label (`--only listener=reverse:*:8001`).

`--config FILE` (YAML):
    defaults: {concurrency: 8, rate: 5/s, timeout: 300, only: [family=responses],
               allow_unsafe: false, api_key_env: VAR, model_map: {A: B}, headers: {K: V}}
    targets:
      - {label: lmstudio, url: "http://127.0.0.1:1234/v1", api_key_env: LMSTUDIO_KEY,
         model_map: {gpt-4o-mini: qwen2.5-7b-instruct}, headers: {x-team: qa}}
Run options (concurrency, rate, timeout, only, allow_unsafe): the command line wins over
`defaults`. Target options: a target's own entry wins over the command line, which wins
over `defaults` (model maps and headers are merged in that order; a model map with `*`
replaces the maps before it). `--to URL` adds one more target. A header value of `""`
(`--header K=`) removes that header.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from wirediff._support import plural, terminal_bar
from wirediff._types import Record
from wirediff.cli.inputs import (
    STDIN,
    capture_file,
    distinct_outputs,
    iter_capture,
    read_once,
)
from wirediff.cli.runner import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    exit_codes,
    seconds,
    standalone,
)
from wirediff.errors import PlanError, UsageError
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.parts import expand_parts
from wirediff.record.spool import Spool
from wirediff.replay.config import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT,
    Options,
    api_key_for,
    options_from_args,
)
from wirediff.replay.dry_run import dry_run
from wirediff.replay.output import Writers, output_path, replay_history
from wirediff.replay.plan import Plan, make_plan, resumed
from wirediff.replay.sender import SPOOL_AT, Counts, TargetRun, replay_all
from wirediff.replay.targets import Target

__all__ = ["main_replay", "register"]

log = logging.getLogger(__name__)


# --- the command ---------------------------------------------------------------------------


def hop_note(plan: Plan) -> str | None:
    """Say in one line which inner hops of two-hop captures the plan leaves out."""
    left = plan.hops_left_out
    if not left:
        return None
    n = sum(left.values())
    where = ", ".join(k if len(left) == 1 else f"{k} ({v})" for k, v in sorted(left.items()))
    return (
        f"wirediff: note: {n} exchange{'s' if n != 1 else ''} on {where} "
        f"{'are inner hops' if n != 1 else 'is an inner hop'} of a two-hop capture (the same "
        "call seen again behind a gateway), not replayed; `--only listener=…` chooses listeners"
    )


def _progress_bar(label: str, total: int, initial: int) -> tuple[Callable[[Counts], None], Any]:
    """Show a tqdm bar on stderr: done/total, rate, and ok / errors / skipped counts."""
    bar = terminal_bar(total=total, initial=initial, desc=f"replay → {label}", unit="ex")

    def update(c: Counts) -> None:
        errors = c.http_errors + c.transport_errors
        bar.set_postfix(ok=c.ok, errors=errors, skipped=c.skipped, refresh=False)
        bar.update(c.resumed + c.done - bar.n)

    return update, bar


def main_replay_args(args: argparse.Namespace) -> int:
    read_once(args.captures)
    distinct_outputs(args.captures, {"-o": args.output}, appends=True)
    piped = [str(p) for p in args.captures if _is_pipe(str(p))]
    if piped and not args.output and not args.dry_run:  # its replay would go in /dev
        raise UsageError(f"{piped[0]}: a pipe has no folder to write its replay beside; give -o")
    if args.output == "-":
        raise UsageError("-o -: a replay appends to a file it reads back to resume; name one")
    opts = options_from_args(args)
    # For captures that will need it, the spool process is forked before they are read: the
    # pages of the records this process then reads stay its own, instead of being copied
    # on its every write to them.
    early = not opts.dry_run and _capture_bytes(args.captures) >= EARLY_SPOOL_BYTES
    spool = Spool(DEFAULT_BODY_CAP) if early else None
    try:
        return _replay(args, opts, spool)
    finally:
        if spool is not None:
            spool.close()  # a no-op when the writers closed it


def _is_pipe(path: str) -> bool:
    """Tell stdin, a pipe or a device, `-`, `/dev/stdin`, `<(…)`, from a file or a folder.

    Stdin redirected from a file is one too: its folder is `/dev`, no place for a replay."""
    if path == "-" or os.path.abspath(path).startswith(("/dev/", "/proc/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


EARLY_SPOOL_BYTES = 64 << 10
"""Captures from this size on hold about `SPOOL_AT` exchanges or more."""


def _capture_bytes(paths: list[str]) -> int:
    size = 0
    for p in paths:
        with contextlib.suppress(OSError):
            size += os.stat(STDIN if p == "-" else p).st_size
    return size


def _replay(args: argparse.Namespace, opts: Options, spool: Spool | None) -> int:
    env = os.environ
    paths = [str(p) for p in args.captures]
    capture_of: dict[str, Path] = {}
    records: list[Record] = []
    for p in paths:
        for part in expand_parts([capture_file(p)]):  # a rotated session: all its parts
            for rec in iter_capture(part):
                records.append(rec)
                capture_of.setdefault(str(rec.get("id")), part)
    try:
        plan = make_plan(records, filters=opts.filters, allow_unsafe=opts.allow_unsafe)
    except PlanError as e:
        raise UsageError(str(e)) from None
    if opts.filters and records and not plan.nodes:  # a filter's typo would replay nothing, quietly
        unfiltered = make_plan(records, allow_unsafe=opts.allow_unsafe)
        if unfiltered.nodes:
            log.warning(
                f"no filter (--only, a config's `only`) matches any of the "
                f"{plural(len(unfiltered), 'exchange')} to replay in {', '.join(paths)}"
            )
    replayed = {str(n.rec.get("label")) for n in plan.nodes}
    for t in opts.targets:
        if t.label in replayed:  # the analysis would take its answers for the originals' own
            raise UsageError(
                f"target {t.label!r}: the label of the exchanges it replays; give the target "
                "a label of its own (--label NAME)"
            )
    note = hop_note(plan)
    if note is not None:
        print(note, file=sys.stderr)

    def path_of(rec: Record, t: Target) -> Path:
        return output_path(rec, capture_of, t, opts)

    done_of: dict[str, dict[str, Record | None]] = {}
    tried_of: dict[str, int] = {}
    attempts_of: dict[str, Mapping[str, int]] = {}
    history = replay_history(
        {t.label: sorted({path_of(n.rec, t) for n in plan.nodes}) for t in opts.targets}
    )
    for t in opts.targets:
        prior, attempts_of[t.label] = history[t.label]
        done = resumed(plan, prior, t)
        tried_of[t.label] = sum(1 for k in prior if k in plan.by_id and k not in done)
        done_of[t.label] = {k: v if plan.dependents[k] else None for k, v in done.items()}
    if opts.dry_run:
        for line in dry_run(plan, opts.targets, done_of, env, tried_of):
            print(line)
        return 0
    if not plan.nodes:
        print(f"wirediff: nothing to replay in {', '.join(paths)}", file=sys.stderr)
        return 0
    keys = {t.label: api_key_for(t, env) for t in opts.targets}
    for t in opts.targets:
        if not httpx.URL(t.url).path.strip("/"):
            note = f"wirediff: note: {t.shown} has no path; an SDK base_url usually ends in /v1"
            print(note, file=sys.stderr)

    runs: list[TargetRun] = []
    progress = _progress_bar if sys.stderr.isatty() else None
    to_send = sum(len(plan) - len(done_of[t.label]) for t in opts.targets)
    if to_send < SPOOL_AT:
        spool = None  # recorded here; an early one is closed on the way out
    elif spool is None:
        spool = Spool(DEFAULT_BODY_CAP)
    writers = Writers(
        sorted({path_of(n.rec, t) for t in opts.targets for n in plan.nodes}), spool=spool
    )
    try:
        asyncio.run(
            replay_all(plan, opts, keys, done_of, path_of, runs, writers, progress, attempts_of)
        )
    except ExceptionGroup as eg:  # from the workers' TaskGroup: a disk error, say
        raise eg.exceptions[0] from None
    except KeyboardInterrupt:
        parts = [
            f"{r.target.label}: {r.counts.resumed + r.counts.done} of {r.counts.total}"
            for r in runs
        ]
        print(
            f"wirediff: interrupted ({'; '.join(parts) or 'nothing sent'} replayed); "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130

    failed = []
    for r in runs:
        c = r.counts
        files = sorted({str(path_of(n.rec, r.target)) for n in plan.nodes})
        print(
            f"replay → {r.target.label}: {c.done} recorded ({c.line()}), "
            f"{c.resumed} already done → {', '.join(files)}",
            file=sys.stderr,
        )
        if c.sent and c.no_answer == c.sent:
            failed.append(r)
    if failed:
        r = failed[0]
        c = r.counts
        again = "run the same command again to retry them"
        if c.unreachable == c.sent:
            kinds = sorted(c.unreachable_kinds)
            head = "TLS failed with" if kinds == ["tls"] else "could not connect to"
            what = f"{head} {r.target.label} at {r.target.shown}: all {c.sent} requests failed (recorded as {' and '.join(kinds)}"
            if kinds == ["tls"]:  # the same again fails the same way
                again = f"`wirediff diagnose` says what to fix; then {again}"
        else:
            what = f"every request to {r.target.label} at {r.target.shown} failed at the transport (none of {c.sent} got an answer; recorded"
        raise UsageError(f"{what}; {again})")
    return 0


def register(subparsers: Any) -> None:
    """Add `replay` to the `wirediff` command line."""
    p = subparsers.add_parser(
        "replay",
        help="re-send recorded sessions to other backends, recorded like live traffic",
        description="\n\n".join((__doc__ or "").split("\n\n")[2:]),
        epilog=exit_codes(
            {
                EXIT_OK: "replayed (or --dry-run printed the plan)",
                EXIT_ERROR: "bad usage or unreadable input, or every request to a target "
                "failed at the transport (the records are kept)",
                EXIT_INTERRUPTED: "interrupted (Ctrl-C): the same command resumes",
            }
        ),
    )
    add_arguments(p)
    p.set_defaults(func=main_replay_args)


class _Once(argparse.Action):
    """Refuse an option given twice, where the last would silently win."""

    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, flag: Any = None) -> None:
        if getattr(ns, self.dest) is not None:
            raise UsageError(f"{flag}: given twice, where one is taken (several targets: --config)")
        setattr(ns, self.dest, value)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="wirediff/1 .jsonl capture(s)")
    p.add_argument(
        "--to",
        metavar="URL",
        action=_Once,
        help="target base URL, as an SDK's base_url (…/v1); several targets: --config",
    )
    p.add_argument("--label", action=_Once, help="name of the --to target (default: its host:port)")
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        action=_Once,
        help="environment variable holding the key",
    )
    p.add_argument(
        "--model-map",
        action="append",
        metavar="A=B",
        help="send model B where the capture says A (`*=B`: every model)",
    )
    p.add_argument(
        "--header", action="append", metavar="K=V", help="set header K (`K=` removes it)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help=f"independent exchanges in flight (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument("--rate", metavar="R/s", help="at most R requests per second (also R/m, R/h)")
    p.add_argument(
        "--only",
        action="append",
        metavar="FILTER",
        help="replay only matching exchanges, e.g. family=responses,stream=true",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be sent; send nothing")
    p.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="also replay DELETE, uploads, batches and other state-changing calls",
    )
    p.add_argument(
        "--timeout",
        type=seconds(),
        metavar="S",
        help=f"seconds per exchange (default {DEFAULT_TIMEOUT:.0f})",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output .jsonl (default: <capture dir>/<session>.<label>.jsonl)",
    )
    p.add_argument(
        "--config", metavar="FILE", action=_Once, help="YAML with `targets:` (and `defaults:`)"
    )


def main_replay(argv: Sequence[str] | None = None) -> int:
    """Run `wirediff replay …` on its own, for tests and `python -m wirediff.cli.replay`."""
    return standalone(register, "replay", argv)


if __name__ == "__main__":
    sys.exit(main_replay())
