"""Installing into a hostile database (issue 11, findings 1 and 2), by both install paths:
``CREATE EXTENSION lonnymq`` and ``lonnymq install --sql-only``.

- A role with CREATE on ``public`` plants, before the install, a look-alike operator for
  every operator symbol the install script uses and every pair of common operand types,
  and a look-alike function for every function the script calls without a schema. Each
  of them raises when called. After the install, no lonnymq object depends on any of them
  (views bind their operators when they are created), and a superuser reading every view
  and calling the API runs none of them.
- A ``lonnymq`` schema that another role created (and granted to PUBLIC) is refused by
  both paths, with a clear error and nothing installed.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from .conftest import (
    ADMIN_DSN,
    ROOT,
    cli,
    drop_database,
    dsn_for,
    recreate_database,
    scalar,
    verify,
)

# Operator symbols planted: a superset of those in the install script (checked below).
SYMBOLS = ["=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "&", "||", "~", "!~", "~~"]
TYPES = [
    "smallint",
    "integer",
    "bigint",
    "numeric",
    "double precision",
    "text",
    "bytea",
    "boolean",
    "interval",
    "timestamptz",
]
# The script calls every function schema-qualified except these SQL constructs; planting
# functions of the same names checks that they stay constructs (never a catalog lookup).
UNQUALIFIED = ["coalesce", "greatest", "least", "floor", "now", "format", "count", "min", "sum"]


def script_text() -> str:
    """The install script of the current version (lonnymq.control's default_version)."""
    control = (ROOT / "lonnymq.control").read_text()
    version = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    assert version is not None
    return (ROOT / f"lonnymq--{version.group(1)}.sql").read_text()


def code_of(script: str) -> str:
    """The script without comments and string literals (dollar-quoted bodies are code)."""
    out, i = [], 0
    while i < len(script):
        if script.startswith("--", i):
            i = script.find("\n", i)
            i = len(script) if i < 0 else i
        elif script[i] == "'":
            i += 1
            while i < len(script):
                if script[i] == "'" and script.startswith("''", i):
                    i += 2
                elif script[i] == "'":
                    i += 1
                    break
                else:
                    i += 1
            out.append("''")
        else:
            out.append(script[i])
            i += 1
    return "".join(out)


def operators_in_script() -> set[str]:
    """Operator tokens of the install script, outside comments and string literals."""
    # (Without PL/pgSQL's #variable_conflict and <<labels>>, which are not operators.)
    text = re.sub(r"<<\w+>>", "", code_of(script_text()).replace("#variable_conflict", ""))
    # "=>" names an argument, "*" is also SELECT *: neither needs a look-alike of its own.
    return set(re.findall(r"[-+*/<>=~!@#%^&|`?]+", text)) - {"=>"} | {"*"}


def test_the_planted_operators_cover_every_operator_of_the_script() -> None:
    assert operators_in_script() <= set(SYMBOLS), operators_in_script() - set(SYMBOLS)


def plant_statements(schema: str) -> str:
    """One function per operand pair (it raises when called) and one operator per symbol
    and pair; one function per unqualified name and operand type(s)."""
    parts = [
        f"CREATE FUNCTION {schema}.hijacked() RETURNS boolean LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'hijacked: a planted look-alike ran'; END $$;"
    ]
    for n, (left, right) in enumerate(itertools.product(TYPES, TYPES)):
        parts.append(
            f"CREATE FUNCTION {schema}.op_{n}({left}, {right}) RETURNS {left} LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM {schema}.hijacked(); RETURN NULL; END $$;"
        )
        for symbol in SYMBOLS:
            parts.append(
                f"CREATE OPERATOR {schema}.{symbol} (FUNCTION = {schema}.op_{n}, "
                f"LEFTARG = {left}, RIGHTARG = {right});"
            )
    for name in UNQUALIFIED:
        for args in [
            *([t] for t in TYPES),
            *([t, t] for t in TYPES),
            ["integer", "bigint"],
            ["bigint", "integer"],
        ]:
            parts.append(
                f"CREATE FUNCTION {schema}.{name}({', '.join(args)}) RETURNS {args[0]} "
                "LANGUAGE plpgsql "
                f"AS $$ BEGIN PERFORM {schema}.hijacked(); RETURN NULL; END $$;"
            )
        parts.append(
            f"CREATE FUNCTION {schema}.{name}() RETURNS timestamptz LANGUAGE plpgsql "
            f"AS $$ BEGIN PERFORM {schema}.hijacked(); RETURN NULL; END $$;"
        )
    return "\n".join(parts)


@pytest.fixture()
def planted_db() -> Iterator[tuple[str, str]]:
    """An empty database where a role with CREATE on public planted look-alikes in public.
    Yields (superuser DSN, planter role)."""
    name = f"lonnymq_rel_install_{uuid.uuid4().hex[:6]}"
    planter = f"rel_planter_{uuid.uuid4().hex[:6]}"
    dsn = recreate_database(ADMIN_DSN, name, extension=False)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(planter)))
    try:
        with psycopg.connect(dsn, autocommit=True) as owner:
            owner.execute(
                sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(planter))
            )
        with psycopg.connect(dsn_for(dsn, name, user=planter), autocommit=True) as conn:
            conn.execute(plant_statements("public"))
        yield dsn, planter
    finally:
        drop_database(ADMIN_DSN, name)
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(planter)))


def install(dsn: str, path: str) -> subprocess.CompletedProcess[str]:
    """Installs as the superuser with its default search_path ("$user", public)."""
    if path == "extension":
        return cli(dsn, "install")
    return cli(dsn, "install", "--sql-only")


def bound_look_alikes(conn: psycopg.Connection[Any], planter: str) -> list[str]:
    """Every dependency of anything on an object the planter owns: a view, default, index
    or constraint that bound a planted operator or function would have one."""
    rows = conn.execute(
        """
        SELECT DISTINCT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) || ' -> '
               || pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0)
        FROM pg_catalog.pg_depend d
        WHERE (d.refclassid = 'pg_catalog.pg_operator'::regclass
               AND d.refobjid IN (SELECT o.oid FROM pg_catalog.pg_operator o
                                  WHERE o.oprowner = %(planter)s::regrole))
           OR (d.refclassid = 'pg_catalog.pg_proc'::regclass
               AND d.refobjid IN (SELECT p.oid FROM pg_catalog.pg_proc p
                                  WHERE p.proowner = %(planter)s::regrole)
               AND d.classid <> 'pg_catalog.pg_operator'::regclass)
        ORDER BY 1
        """,
        {"planter": planter},
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("path", ["extension", "sql-only"])
def test_planted_look_alikes_are_never_bound_or_run(planted_db: tuple[str, str], path: str) -> None:
    dsn, planter = planted_db
    result = install(dsn, path)
    assert result.returncode == 0, result
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert str(scalar(conn, "SHOW search_path")) == '"$user", public'
        planted = scalar(
            conn, "SELECT count(*) FROM pg_operator WHERE oprowner = %s::regrole", (planter,)
        )
        assert planted == len(SYMBOLS) * len(TYPES) ** 2
        assert bound_look_alikes(conn, planter) == []
        # Work in every state the views show, read as the superuser: a planted function
        # that ran would raise.
        conn.execute(
            "SELECT lonnymq.channel_set('q', 'capped', max_concurrency => 2, max_size => 10)"
        )
        conn.execute(
            "SELECT * FROM lonnymq.message_create_batch('q', ARRAY['a', 'capped', NULL],"
            " ARRAY['x', 'y', 'z']::bytea[], dedup_keys => ARRAY['k', 'k', 'k'],"
            " idempotency_key => 'i')"
        )
        conn.execute("SELECT * FROM lonnymq.message_create('q', 'a', 'p', priority => 2)")
        conn.execute("SELECT * FROM lonnymq.message_create('q', 'a', 'later', delay_ms => 60000)")
        [(mid, attempts)] = conn.execute(
            "SELECT id, num_attempts FROM lonnymq.message_dequeue('q', 60000)"
        ).fetchall()
        assert conn.execute(
            "SELECT lonnymq.message_fail(%s, %s, 'x')", (mid, attempts)
        ).fetchone() == ("failed",)
        conn.execute("SELECT * FROM lonnymq.message_dequeue('q', 60000, 5)")
        for view in ("messages", "channel_stats", "queue_stats", "message_archive"):
            conn.execute(f"SELECT * FROM lonnymq.{view}").fetchall()
        assert scalar(conn, "SELECT count(*) FROM lonnymq.messages WHERE dequeue_at > now()") == 1
        assert scalar(conn, "SELECT lonnymq.archive_prune('0')") == 1
    assert verify(dsn) == []


SQUAT = """
CREATE SCHEMA lonnymq;
GRANT ALL ON SCHEMA lonnymq TO PUBLIC;
"""


@pytest.mark.parametrize("path", ["extension", "sql-only"])
def test_a_lonnymq_schema_owned_by_another_role_is_refused(
    planted_db: tuple[str, str], path: str
) -> None:
    dsn, planter = planted_db
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(str(scalar(owner, "SELECT current_database()"))),
                sql.Identifier(planter),
            )
        )
    planter_dsn = psycopg.conninfo.make_conninfo(dsn, user=planter)
    with psycopg.connect(planter_dsn, autocommit=True) as conn:
        conn.execute(SQUAT)
    result = install(dsn, path)
    assert result.returncode != 0, result
    assert "schema lonnymq" in result.stderr and planter in result.stderr, result.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert scalar(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'lonnymq'") == 0
        assert (
            scalar(
                conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'lonnymq'::regnamespace"
            )
            == 0
        )
        assert (
            scalar(
                conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'lonnymq'::regnamespace"
            )
            == 0
        )


def test_a_lonnymq_schema_with_objects_in_it_is_refused(planted_db: tuple[str, str]) -> None:
    """Owned by the installer but not empty (a look-alike of an API function, planted by a
    role that had CREATE on it): CREATE EXTENSION refuses; empty again, it installs."""
    dsn, _planter = planted_db
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA lonnymq")
        conn.execute(
            "CREATE FUNCTION lonnymq.message_create(text, text, text) RETURNS void "
            "LANGUAGE sql AS ''"
        )
        with pytest.raises(
            psycopg.errors.ObjectNotInPrerequisiteState, match="schema lonnymq is not empty"
        ):
            conn.execute("CREATE EXTENSION lonnymq")
        conn.execute("DROP FUNCTION lonnymq.message_create(text, text, text)")
        conn.execute("CREATE EXTENSION lonnymq")
        row = conn.execute("SELECT * FROM lonnymq.message_create('q', 'c', 'x')").fetchone()
        assert row is not None and row[0] == "created"


def test_an_update_refuses_a_schema_the_extension_owner_does_not_own(
    planted_db: tuple[str, str],
) -> None:
    """1.0 installed into a squatted schema; updating to this version refuses until the
    schema is the extension owner's again."""
    dsn, planter = planted_db
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE SCHEMA lonnymq AUTHORIZATION {}").format(sql.Identifier(planter))
        )
        conn.execute("CREATE EXTENSION lonnymq VERSION '1.0'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"owned by role {planter}"):
            conn.execute("ALTER EXTENSION lonnymq UPDATE")
        assert (
            scalar(conn, "SELECT extversion FROM pg_extension WHERE extname = 'lonnymq'") == "1.0"
        )
        conn.execute("ALTER SCHEMA lonnymq OWNER TO CURRENT_USER")
        conn.execute("ALTER EXTENSION lonnymq UPDATE")
        assert (
            scalar(conn, "SELECT extversion FROM pg_extension WHERE extname = 'lonnymq'") != "1.0"
        )
