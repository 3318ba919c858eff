"""``python -m lonnymq.demo [--dsn DSN]``: run the multi-tenant demo (see package docs)."""

from __future__ import annotations

import argparse
import os
import sys

from .run import run_demo


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lonnymq.demo", description=__doc__)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("DATABASE_URL"),
        help="database with lonnymq installed (default: $DATABASE_URL)",
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4, help="slots per worker")
    args = parser.parse_args()
    if not args.dsn:
        print("demo: pass --dsn or set DATABASE_URL", file=sys.stderr)
        return 2
    return run_demo(args.dsn, workers=args.workers, concurrency=args.concurrency)


if __name__ == "__main__":
    raise SystemExit(main())
