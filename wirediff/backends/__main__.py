"""Run one stand-in backend from the command line, until Ctrl-C.

Usage:
    python -m wirediff.backends PROFILE [--port N] [--delay S] [--api-key-env VAR] [--gzip]
                                        [--redirect URL] [--models A,B] [--verbose]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from wirediff.backends.server import FAULT_MODELS
from wirediff.backends.standin import make_standin
from wirediff.profiles import load_profiles

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    known = sorted(load_profiles())
    ap = argparse.ArgumentParser(
        prog="python -m wirediff.backends",
        description="Serve a local stand-in for an OpenAI-compatible provider.",
        epilog="fault models (any profile): " + ", ".join(FAULT_MODELS),
    )
    ap.add_argument("profile", help=f"provider profile ({', '.join(known)})")
    ap.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="listen port (default: a free one)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds between SSE events")
    ap.add_argument("--api-key-env", metavar="VAR", help="require the key held in this variable")
    ap.add_argument("--models", help="comma-separated model ids to serve (default: the profile's)")
    ap.add_argument("--gzip", action="store_true", help="gzip answers for clients that accept it")
    ap.add_argument("--redirect", metavar="URL", help="answer every request 301 to URL + path")
    ap.add_argument("--verbose", action="store_true", help="log each request to stderr")
    args = ap.parse_args(argv)

    if args.profile not in known:
        print(
            f"error: unknown provider profile {args.profile!r} (known: {', '.join(known)})",
            file=sys.stderr,
        )
        return 2
    if args.delay < 0 or not 0 <= args.port <= 65535:
        print("error: --delay must be >= 0 and --port within 0..65535", file=sys.stderr)
        return 2
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(f"error: environment variable {args.api_key_env} is not set", file=sys.stderr)
            return 2
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
        print(
            f"error: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr
        )
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(url, flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        st.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
