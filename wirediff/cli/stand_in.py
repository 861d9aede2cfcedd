"""Serve a local stand-in for a provider until Ctrl-C: `wirediff stand-in NAME [--port P]`.

Its answers, errors and quirks are as `wirediff/profiles/NAME.yaml` records them; it prints the
base URL a client is given, `http://127.0.0.1:P/v1`."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any
from urllib.parse import urlsplit

from wirediff.backends.server import FAULT_MODELS
from wirediff.backends.standin import make_standin
from wirediff.cli.inputs import key_from_env
from wirediff.cli.runner import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, exit_codes, seconds
from wirediff.errors import UsageError
from wirediff.profiles import load_profiles

__all__ = ["register"]


def cmd_stand_in(args: argparse.Namespace) -> int:
    known = sorted(load_profiles())
    if args.profile not in known:
        raise UsageError(f"unknown stand-in {args.profile!r} (known: {', '.join(known)})")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: a port from 0 (a free one) to 65535")
    if args.redirect is not None:
        where = urlsplit(args.redirect)
        if where.scheme not in ("http", "https") or not where.netloc:
            raise UsageError(f"--redirect {args.redirect!r}: an http:// or https:// URL")
    api_key = key_from_env(args.api_key_env)
    models = (
        [m.strip() for m in args.models.split(",") if m.strip()]
        if args.models is not None
        else None
    )
    st = make_standin(
        args.profile,
        delay=args.delay,
        api_key=api_key,
        models=models,
        gzip=args.gzip,
        redirect=args.redirect,
        host=args.host,
        port=args.port,
        verbose=args.verbose,
    )
    try:
        url = st.start()
    except OSError as e:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"{url}/v1", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:  # Ctrl-C is how a stand-in ends
        pass
    finally:
        st.stop()
    return EXIT_OK


def register(sub: Any) -> None:
    known = ", ".join(sorted(load_profiles()))
    p = sub.add_parser(
        "stand-in",
        help=f"serve a local stand-in for a provider ({known}) and print its base URL",
        description="Serve a local stand-in for an OpenAI-compatible provider until Ctrl-C; "
        "its base URL (…/v1) is printed once it listens.\n\nfault models, model ids any "
        "stand-in answers with that fault (a request's `model`, or `wirediff replay "
        "--model-map '*=fault-truncate'`): " + ", ".join(FAULT_MODELS),
        epilog=exit_codes(
            {
                EXIT_OK: "stopped by Ctrl-C or SIGTERM: how a stand-in ends",
                EXIT_ERROR: "bad usage, an unknown stand-in, a port already taken (one line on "
                "stderr says why)",
                EXIT_INTERRUPTED: None,
            }
        ),
    )
    p.add_argument("profile", metavar="NAME", help=f"the provider ({known})")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="listen port (default: a free one)")
    p.add_argument(
        "--delay", type=seconds(zero=True), default=0.0, help="seconds between SSE events"
    )
    p.add_argument("--api-key-env", metavar="VAR", help="require the key held in this variable")
    p.add_argument("--models", help="comma-separated model ids to serve (default: the profile's)")
    p.add_argument("--gzip", action="store_true", help="gzip answers for clients that accept it")
    p.add_argument("--redirect", metavar="URL", help="answer every request 301 to URL + path")
    p.add_argument("--verbose", action="store_true", help="log each request to stderr")
    p.set_defaults(func=cmd_stand_in)
