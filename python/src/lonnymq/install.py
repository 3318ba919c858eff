"""Installing lonnymq into a database: as an extension, or as plain SQL objects.

``--sql-only`` is for hosts that allow no custom extensions: it runs the same versioned
script the extension uses (shipped inside this package) with the few extension-only
statements removed, inside one transaction, with ``search_path`` pinned to
``pg_catalog, pg_temp`` as CREATE EXTENSION pins it: whatever the installer's own path holds
(a look-alike operator planted in ``public``, say) can never be bound into the views.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

from psycopg import Connection

from .errors import LonnymqError

SCRIPT_PATTERN = re.compile(r"^lonnymq--(\d+(?:\.\d+)*)\.sql$")

# psql-only guard line every extension script starts with.
GUARD = re.compile(r"^\\echo .*\\quit\s*$", re.MULTILINE)
# Marks tables for pg_dump; only valid inside CREATE EXTENSION and meaningless without it.
CONFIG_DUMP = re.compile(
    r"^\s*SELECT\s+pg_catalog\.pg_extension_config_dump\([^;]*\);\s*$", re.MULTILINE
)


def _packaged_scripts() -> list[tuple[str, str]]:
    folder = resources.files("lonnymq") / "sql"
    if not folder.is_dir():
        return []
    return [(f.name, f.read_text()) for f in folder.iterdir() if SCRIPT_PATTERN.match(f.name)]


def _checkout_scripts() -> list[tuple[str, str]]:
    # An editable install runs from the checkout: the development version's script is
    # sql/*.sql in name order, as the Makefile concatenates it (built or not).
    repo = Path(__file__).resolve().parents[3]
    control = repo / "lonnymq.control"
    if not control.exists():
        return []
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control.read_text(), re.MULTILINE)
    if match is None:
        return []
    parts = sorted((repo / "sql").glob("*.sql"))
    return [(f"lonnymq--{match.group(1)}.sql", "".join(p.read_text() for p in parts))]


def extension_script() -> tuple[str, str]:
    """(version, text) of the newest full install script available."""
    scripts = _packaged_scripts() or _checkout_scripts()
    if not scripts:
        raise LonnymqError(
            "the lonnymq SQL script is not in this installation; "
            "build it with `make` in the repository or reinstall the package"
        )

    def version(item: tuple[str, str]) -> tuple[int, ...]:
        match = SCRIPT_PATTERN.match(item[0])
        assert match is not None
        return tuple(int(x) for x in match.group(1).split("."))

    name, text = max(scripts, key=version)
    return ".".join(str(x) for x in version((name, text))), text


def sql_only_script() -> str:
    """The extension script turned into plain SQL that creates schema lonnymq itself."""
    _version, text = extension_script()
    text = GUARD.sub("", text)
    text = CONFIG_DUMP.sub("", text)
    text = text.replace("@extschema@", "lonnymq")
    return "CREATE SCHEMA lonnymq;\n" + text


def install_extension(conn: Connection[Any]) -> str:
    """CREATE EXTENSION lonnymq (the server must have the extension files installed)."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS lonnymq")
    row = conn.execute(
        "SELECT extversion FROM pg_catalog.pg_extension"
        " WHERE extname OPERATOR(pg_catalog.=) 'lonnymq'"
    ).fetchone()
    return str(row[0]) if row else "?"


def install_sql_only(conn: Connection[Any]) -> str:
    """Create the lonnymq objects without an extension, in one transaction.

    Refuses an existing ``lonnymq`` schema, whoever owns it: the script creates its own.
    """
    version, _text = extension_script()
    with conn.transaction():
        # Only pg_catalog is searched (pg_temp last, never for operators or functions):
        # the script's expressions bind to built-ins whatever the caller's search_path.
        conn.execute("SET LOCAL search_path = pg_catalog, pg_temp")
        owner = conn.execute(
            "SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace n"
            " WHERE n.nspname OPERATOR(pg_catalog.=) 'lonnymq'"
        ).fetchone()
        if owner:
            raise LonnymqError(
                f"schema lonnymq already exists in this database (owned by {owner[0]}): "
                "drop or rename it first; --sql-only creates its own schema"
            )
        conn.execute(sql_only_script())
    return version
