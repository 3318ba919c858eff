"""``lonnymq install [--sql-only]``: create the extension, or its objects without one."""

from __future__ import annotations

import argparse
from typing import Any

import psycopg

from .. import install as installer


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "install", help="install lonnymq into the database"
    )
    parser.add_argument(
        "--sql-only",
        action="store_true",
        help="create the objects from the SQL shipped in this package, without CREATE "
        "EXTENSION (for hosts that allow no custom extensions)",
    )
    parser.set_defaults(run=run)


def run(dsn: str, args: argparse.Namespace) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if args.sql_only:
            version = installer.install_sql_only(conn)
            print(f"installed lonnymq {version} as plain SQL (schema lonnymq, no extension)")
        else:
            version = installer.install_extension(conn)
            print(f"extension lonnymq {version} installed")
    return 0
