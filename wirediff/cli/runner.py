"""Run commands with the CLI's exit codes, kept in one place.

0 ok, 1 a finding (`check`, `diagnose --fail`), 2 bad usage, unreadable input or any other error
(one line, never a traceback), 130 interrupted. Warnings (a torn or unfinished line skipped in a
capture) are one line each on stderr."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import logging
import math
import os
import sys
import textwrap
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TextIO, cast

from wirediff.errors import UsageError, WirediffError
from wirediff.record.scrub import scrub_output

__all__ = [
    "DEBUG_ENV",
    "EXIT_ERROR",
    "EXIT_FOUND",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "Command",
    "Parser",
    "exit_codes",
    "run",
    "run_command",
    "seconds",
    "standalone",
    "terminal",
]

Command = Callable[[argparse.Namespace], int]
DEBUG_ENV = "WIREDIFF_DEBUG"
"""The variable that, set to 1, adds the traceback to an unexpected error; the exit is still 2."""
UNEXPECTED_MESSAGE_CHARS = 300
"""An unexpected error's message is cut to this, on one line: it may quote input."""
EXIT_OK, EXIT_FOUND, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_READER_GONE = 141
"""The reader of the output went away (`… | head`): quiet, as a tool SIGPIPE ends."""
COMMON_CODES = {
    EXIT_ERROR: "bad usage or unreadable input (one line on stderr says why)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


def exit_codes(codes: Mapping[int, str | None]) -> str:
    """Write a command's `--help` epilog: its own exit codes.

    2 and 130 are there unless it says otherwise; `None` marks a code it never exits with."""
    rows = sorted((code, text) for code, text in {**COMMON_CODES, **codes}.items() if text)
    return "exit codes:\n" + "\n".join(
        textwrap.fill(text, 88, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        for code, text in rows
    )


def seconds(*, zero: bool = False) -> Callable[[str], float]:
    """Make an option's type: seconds, more than 0 or, with `zero`, at least 0, and at most
    what a thread or a socket can wait, `threading.TIMEOUT_MAX`.

    argparse names the option in the error: `argument --timeout: seconds, more than 0: 'nan'`."""
    least = "at least 0" if zero else "more than 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (value >= 0 if zero else value > 0) or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"seconds, {least}: {text!r}")
        if value > threading.TIMEOUT_MAX:
            raise argparse.ArgumentTypeError(
                f"seconds, at most {threading.TIMEOUT_MAX:,.0f}: {text!r}"
            )
        return value

    return parse


def folder(text: str) -> str:
    """Read an option's folder to write into: named, and no file already there.

    argparse names the option in the error: `argument --out: a file, not a folder: 'a'`."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: name a folder")
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"a file, not a folder: {text!r}")
    return text


class Parser(argparse.ArgumentParser):
    """Parse like argparse, with errors in one line like every other error of the CLI.

    Its epilog, the exit codes, keeps its lines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{' '.join(message.split())} (see `{self.prog} --help`)")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """Parse as argparse does; arguments no parser knows are named by the command's own.

        Else the top parser would, pointing to `wirediff --help` for a command's option."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            chosen = getattr(parsed, "command", None)
            commands = self._subparsers._group_actions[0].choices if self._subparsers else {}
            parser = commands.get(chosen, self) if isinstance(commands, dict) else self
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"wirediff: {record.levelname.lower()}: {record.getMessage()}"


class _ToStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Write to `sys.stderr` as it is when a warning comes.

    One handler serves every command run in the process, and a caller may have redirected
    stderr since."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _warnings_to_stderr() -> None:
    log = logging.getLogger("wirediff")
    if not any(isinstance(h, _ToStderr) for h in log.handlers):
        handler = _ToStderr()
        handler.setFormatter(_OneLine())
        log.addHandler(handler)
        log.setLevel(logging.WARNING)


class _Scrubbed:
    """Scrub every write to a terminal stream with `scrub_output`.

    Whatever a command prints (its lines, its JSON, a warning, an error) goes out through it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(scrub_output(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _escape(e: UnicodeError) -> tuple[bytes, int]:
    """Write characters the terminal's encoding lacks: the bytes an argument gave, or escapes.

    An argument's bytes that are not text in the locale come as `surrogateescape` characters,
    which go back out as those bytes; any other character is written as `\\u2192`."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    out = bytearray()
    for char in e.object[e.start : e.end]:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(code - 0xDC00)
        else:
            out += char.encode("ascii", "backslashreplace")
    return bytes(out), e.end


codecs.register_error("wirediff-terminal", _escape)


def terminal(stream: TextIO | None) -> TextIO:
    """Make a stream the command may print anything to, whatever the terminal's encoding.

    What the encoding lacks (`→` on a latin-1 or a C-locale terminal) is written as its
    `\\u2192` escape, and the bytes of an argument that were no text in the locale as they
    were given; a stream closed before the command started (`>&-`) takes what is printed to
    nowhere."""
    if stream is None:
        return open(os.devnull, "w", encoding="utf-8")
    if (
        isinstance(stream, io.TextIOWrapper)
        and not stream.closed
        and stream.errors in ("strict", "surrogateescape", "backslashreplace")
    ):
        stream.reconfigure(errors="wirediff-terminal")
    return stream


@contextlib.contextmanager
def _scrubbed_terminal() -> Iterator[None]:
    out, err = sys.stdout, sys.stderr
    if isinstance(out, _Scrubbed):  # a command run by another: scrubbed already
        yield
        return
    sys.stdout = cast(TextIO, _Scrubbed(terminal(out)))
    sys.stderr = cast(TextIO, _Scrubbed(terminal(err)))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def run_command(func: Command, args: argparse.Namespace) -> int:
    """Run one subcommand with the CLI's exit codes, what it prints scrubbed."""
    _warnings_to_stderr()
    with _scrubbed_terminal():
        return _run(func, args)


def _run(func: Command, args: argparse.Namespace) -> int:
    try:
        return func(args)
    except WirediffError as e:
        print(f"wirediff: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `… | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return EXIT_READER_GONE
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"wirediff: error: {where}{e.strerror or e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("wirediff: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug, or input nothing above foresaw: never exit 1 ("found")
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            traceback.print_exc()
        message = " ".join(str(e).split())[:UNEXPECTED_MESSAGE_CHARS]
        print(
            f"wirediff: error: unexpected {type(e).__name__}: {message} "
            f"(set {DEBUG_ENV}=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR


def run(parser: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    """Parse `argv` and run the command it names; a bad command line is one line, exit 2.

    `--help` and `--version` exit 0 through `SystemExit`. A working directory deleted since the
    shell entered it is said first: paths resolve against it, and would fail naming no file."""
    with _scrubbed_terminal():
        try:
            args = parser.parse_args(argv)
        except UsageError as e:
            print(f"wirediff: error: {e}", file=sys.stderr)
            return EXIT_ERROR
        try:
            os.getcwd()
        except FileNotFoundError:
            print(
                "wirediff: error: the working directory no longer exists; cd to one that does",
                file=sys.stderr,
            )
            return EXIT_ERROR
        return run_command(args.func, args)


def standalone(register: Callable[[Any], None], name: str, argv: Sequence[str] | None) -> int:
    """Run one subcommand on its own with the CLI's parser for it and its exit codes.

    This serves `python -m wirediff.cli.report …` and tests."""
    parser = Parser(prog="wirediff")
    register(parser.add_subparsers(dest="command", required=True))
    return run(parser, [name, *(sys.argv[1:] if argv is None else argv)])
