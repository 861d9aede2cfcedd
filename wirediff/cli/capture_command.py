"""Run `wirediff capture`: mitmdump with the capture addon in reverse mode, ready for one client.

Usage:
    wirediff capture --to URL [--label L] [--session S] [--port P] [--dir DIR]
        [-- MITMDUMP ARGS...]

It prints the base URL to give the client and the capture file's absolute path, then records
until Ctrl-C, which stops mitmdump and exits with 130. Each run is a new session, named by
default after its UTC start time. The addon's options come from the addon's own `load()`, so
`--help` always lists what the addon takes.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast
from urllib.parse import urlsplit

from wirediff.cli.mitm import CaptureProxy
from wirediff.cli.netutil import free_port
from wirediff.cli.runner import EXIT_ERROR, EXIT_INTERRUPTED, exit_codes, standalone
from wirediff.errors import UsageError
from wirediff.record.parts import capture_parts, parse_rotation, session_problem
from wirediff.record.redact import redact_url
from wirediff.replay.targets import port_problem

if TYPE_CHECKING:
    from mitmproxy.addonmanager import Loader

__all__ = [
    "AddonOption",
    "addon_options",
    "main_capture",
    "new_session",
    "register",
    "split_upstream",
]

DEFAULT_PORT = 8080
"""mitmproxy's own default, and the port in the README's client examples."""
DEFAULT_API_PATH = "/v1"
"""The path added to the proxy for the client when `--to` has none.

The OpenAI SDKs' base URLs end in /v1."""
DESCRIPTION = """\
Prints the base URL to give the client and the capture file's absolute path, then records
until Ctrl-C, which stops mitmdump and exits with 130. Each run is a new session (default:
its UTC start time)."""
LIVE_SESSION = (
    "The session can also change while mitmproxy runs, without a restart: set "
    "capture_session in mitmweb's Options or with `:set capture_session=NAME` in mitmproxy's "
    "console; the addon closes the current file and appends to <NAME>.jsonl."
)
EXIT_CODES = exit_codes(
    {
        EXIT_INTERRUPTED: "stopped by Ctrl-C or SIGTERM: the usual end",
        EXIT_ERROR: "bad usage, a port already taken, or mitmdump could not start or stopped "
        "on its own (its output says why)",
    }
)
SET_BY_FLAGS = {"capture_dir": "--dir", "capture_session": "--session", "capture_label": "--label"}


class AddonOption(NamedTuple):
    name: str
    type: str
    default: object
    help: str


class _OptionRecorder:
    """Stand in for mitmproxy's `Loader`, keeping what the addon's `load()` declares."""

    def __init__(self) -> None:
        self.options: list[AddonOption] = []

    def add_option(
        self, name: str, typespec: type, default: object, help: str, choices: object = None
    ) -> None:
        self.options.append(AddonOption(name, typespec.__name__, default, help))


def addon_options() -> list[AddonOption]:
    """Return the capture addon's options, as its `load()` declares them."""
    from wirediff.addons.capture import Capture

    recorder = _OptionRecorder()
    Capture().load(cast("Loader", recorder))  # it records what `add_option` is given
    return recorder.options


def options_help() -> str:
    flags = ", ".join(f"{flag} sets {name}" for name, flag in SET_BY_FLAGS.items())
    lines = [f"capture addon options ({flags}; the others: -- --set NAME=VALUE):"]
    for o in addon_options():
        lines.append(f"  {o.name} ({o.type}, default: {o.default!r})")
        lines += textwrap.wrap(o.help, 88, initial_indent=" " * 6, subsequent_indent=" " * 6)
    lines.append("")
    lines += textwrap.wrap(LIVE_SESSION, 90)
    return "\n".join(lines)


class _HelpWithAddonOptions(argparse.Action):
    """Print the usual help for `-h`, then the addon's options.

    They are read only when help is asked for, so other commands never import mitmproxy."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show this help and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.epilog = f"{options_help()}\n\n{EXIT_CODES}"
        parser.print_help()
        parser.exit()


def split_upstream(url: str) -> tuple[str, str]:
    """Split the upstream into `(upstream for mitmproxy's reverse mode, path for the base URL)`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--to needs an http(s) URL, e.g. https://api.openai.com/v1: {redact_url(url)!r}"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(
            f"--to takes a base URL without query, fragment or credentials: {redact_url(url)!r}"
        )
    port = port_problem(url)
    if port is not None:
        raise UsageError(f"--to: {port}")
    return f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/") or DEFAULT_API_PATH


def check_port(port: int) -> int:
    """Check the port to listen on, 0 for any free one; a port already taken is a usage error."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: a port is from 0 to 65535 (0: any free one)")
    if port == 0:
        return free_port()
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise UsageError(
                f"port {port} is not free ({e.strerror}); --port 0 picks a free one"
            ) from None
    return port


def check_extra(extra: list[str]) -> list[str]:
    """Check mitmdump's arguments after `--` before the proxy starts.

    They are refused when they set a capture option a flag sets, one the addon does not take, or
    a rotation that is none."""
    from wirediff.addons._options import given_twice, unknown_names, unparsable
    from wirediff.addons.capture import BOOL_OPTIONS, INT_OPTIONS, body_cap_problem

    if extra[:1] == ["--"]:
        extra = extra[1:]
    given: dict[str, list[str]] = {}
    for arg in extra:
        name, _, value = arg.removeprefix("--set=").partition("=")
        unknown = unknown_names([name], "capture_", [o.name for o in addon_options()])
        if unknown:
            raise UsageError(f"--set {unknown[0]}")
        if name in SET_BY_FLAGS:
            raise UsageError(f"set {name} with {SET_BY_FLAGS[name]}, not with --set")
        given.setdefault(name, []).append(value)
    # refused before the proxy starts, in one line, not after mitmdump's own
    for name, values in given.items():
        found = given_twice(name, values) if name.startswith("capture_") else None
        found = found or unparsable(name, values, INT_OPTIONS, BOOL_OPTIONS)
        if not found and name == "capture_body_cap":
            found = body_cap_problem(int(values[-1]))
        if not found and name == "capture_rotate":
            try:
                parse_rotation(values[-1])
            except ValueError as e:
                found = str(e)
        if found:
            raise UsageError(f"--set {found}")
    return extra


def new_session(capture_dir: Path, now: float | None = None) -> str:
    """Name a new session by its UTC start time.

    `-2`, `-3`… follow it when a run in the same second took it."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    name, n = stamp, 1
    while (capture_dir / f"{name}.jsonl").exists():
        n += 1
        name = f"{stamp}-{n}"
    return name


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


_FROM_FIRST = " (written from the first exchange)"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_capture(args: argparse.Namespace) -> int:
    upstream, api_path = split_upstream(args.to)
    extra = check_extra(list(args.mitmdump_args))
    capture_dir = Path(args.dir).resolve()
    session = args.session or new_session(capture_dir)
    wrong = session_problem(session)
    if wrong:
        raise UsageError(f"--session {wrong}")
    port = check_port(args.port)
    try:
        capture_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--dir {args.dir}: cannot make the folder ({e.strerror or e})") from None
    proxy = CaptureProxy(
        [upstream],
        capture_dir,
        session,
        label=args.label or "",
        ports=[port],
        # Flows and warnings on the terminal; mitmproxy's start-up chatter gives way to the
        # lines below (`-- --set termlog_verbosity=info` brings it back).
        extra=["--set", "termlog_verbosity=warn", *extra],
        console=True,
    )
    before = _exchanges(proxy.capture_file)
    try:
        proxy.start()
    except RuntimeError as e:
        raise UsageError(str(e)) from None
    print(f"wirediff capture: reverse:{upstream} (session {session})")
    print(f"  client base URL: http://127.0.0.1:{port}{api_path}")
    print(
        f"  capture file:    {proxy.capture_file}{'' if proxy.capture_file.exists() else _FROM_FIRST}"
    )
    print("  Ctrl-C stops.", flush=True)
    assert proxy.proc is not None
    # SIGTERM (`kill`, `timeout`, a service manager) stops mitmdump as Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        status = proxy.proc.wait()
    except KeyboardInterrupt:  # how a capture ends: say what it recorded
        proxy.stop()
        n, held = _exchanges(proxy.capture_file)[0] - before[0], _held(proxy.capture_file)
        print(
            f"wirediff capture: stopped: {n} exchange{'' if n == 1 else 's'} recorded; {held}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    raise UsageError(f"mitmdump exited with status {status} (its output above says why)")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "capture",
        help="record a client's traffic: mitmdump with the capture addon in reverse mode",
        description=DESCRIPTION,
        epilog=EXIT_CODES,
        add_help=False,
    )
    p.add_argument("-h", "--help", action=_HelpWithAddonOptions)
    p.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the upstream, as the client's base URL would name it (https://api.openai.com/v1); "
        f"the client gets the proxy with the same path ({DEFAULT_API_PATH} if URL has none)",
    )
    p.add_argument("--label", help="which backend this is (default: the upstream host)")
    p.add_argument("--session", help="the capture file's stem (default: the UTC start time)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"where the proxy listens on 127.0.0.1 (default: {DEFAULT_PORT}; 0: any free port)",
    )
    p.add_argument("--dir", default="captures", help="where captures go (default: captures)")
    p.add_argument(
        "mitmdump_args",
        nargs=argparse.REMAINDER,
        metavar="-- MITMDUMP ARGS",
        help="passed to mitmdump as they are (--set NAME=VALUE, --mode for more listeners, …)",
    )
    p.set_defaults(func=cmd_capture)


def main_capture(argv: Sequence[str] | None = None) -> int:
    """Run `wirediff capture …` on its own.

    This serves tests and `python -m wirediff.cli.capture_command`."""
    return standalone(register, "capture", argv)


if __name__ == "__main__":
    sys.exit(main_capture())


def _exchanges(capture: Path) -> tuple[int, int]:
    """Count the exchanges the session holds, and its parts (`capture_rotate`)."""
    parts = capture_parts(capture) if capture.exists() else [capture]
    return sum(count_lines(p) for p in parts), len(parts)


def _held(capture: Path) -> str:
    """Say what the session holds, in all its parts; a file made at its first exchange."""
    if not capture.exists():
        return f"{capture} not written: no exchange came through"
    n, parts = _exchanges(capture)
    where = f"{capture}" if parts == 1 else f"{capture} and its {parts - 1} more parts"
    return f"{where} hold{'s' if parts == 1 else ''} {n} exchange{'' if n == 1 else 's'}"
