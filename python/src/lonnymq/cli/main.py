"""Argument parsing and dispatch for the ``lonnymq`` command.

Each subcommand lives in its own module; this one only wires them up and resolves the DSN
(``--dsn`` or ``DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import psycopg
import psycopg.errors

from ..errors import LonnymqError
from . import enqueue, install, send, status, tail, web


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lonnymq", description="Install and operate lonnymq queues in PostgreSQL."
    )
    dsn_help = "libpq connection string (default: $DATABASE_URL)"
    parser.add_argument("--dsn", help=dsn_help)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (install, status, send, tail, enqueue, web):
        module.register(commands)
    # The common options are accepted after the command too (lonnymq status --dsn ...).
    # SUPPRESS: a subcommand that was not given --dsn leaves the one before it alone.
    for subparser in commands.choices.values():
        subparser.add_argument("--dsn", default=argparse.SUPPRESS, help=dsn_help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dsn = args.dsn or os.environ.get("DATABASE_URL")
    if not dsn:
        print("lonnymq: no database: pass --dsn or set DATABASE_URL", file=sys.stderr)
        return 2
    try:
        result: int = args.run(dsn, args)
        return result
    except (
        psycopg.errors.UndefinedTable,
        psycopg.errors.UndefinedFunction,
        psycopg.errors.InvalidSchemaName,
    ) as exc:
        print(
            f"lonnymq: {str(exc).strip()}\n"
            "lonnymq: is lonnymq installed in this database? Run `lonnymq install`.",
            file=sys.stderr,
        )
        return 1
    except (LonnymqError, psycopg.Error) as exc:
        print(f"lonnymq: {str(exc).strip()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
