"""The Spark writer's bookkeeping against other roles of the same database, as real roles.

Each attack is one that worked on 1.12, where every Spark role shared schema lonnymq_spark:
forging another role's commit record, deleting or rewriting it, putting a trigger on the
tables it writes, squatting its schema before its first use. They need no SparkSession: the
roles run the functions a Spark job's driver and tasks call, in the same order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from lonnymq.spark import _bookkeeping, _read, _write
from lonnymq.spark._bookkeeping import UnsafeBookkeeping, schema_for
from lonnymq.spark._convert import STRING, ColumnMapping
from lonnymq.spark._options import Options

from .conftest import ADMIN_DSN, recreate_database

DATABASE = "lonnymq_spark_roles"
MAPPING = ColumnMapping(None, "content", STRING, None, None)
LAYOUT_1_12 = Path(__file__).with_name("spark_layout_1_12.sql")


class Site:
    """A database with the extension and two roles that may produce and create schemas."""

    def __init__(self) -> None:
        self.dsn = recreate_database(DATABASE)
        suffix = uuid.uuid4().hex[:8]
        self.a, self.b = f"lmqs_a_{suffix}", f"lmqs_b_{suffix}"
        self.admin = psycopg.connect(self.dsn, autocommit=True)
        self.admin.execute("CREATE EXTENSION lonnymq")
        for role in (self.a, self.b):
            self.admin.execute(
                sql.SQL(
                    "CREATE ROLE {r} LOGIN; GRANT CREATE ON DATABASE {d} TO {r};"
                    " GRANT USAGE ON SCHEMA lonnymq TO {r};"
                    " GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA lonnymq TO {r};"
                    " GRANT SELECT ON ALL TABLES IN SCHEMA lonnymq TO {r}"
                ).format(r=sql.Identifier(role), d=sql.Identifier(DATABASE))
            )

    def dsn_of(self, role: str) -> str:
        return conninfo.make_conninfo(self.dsn, user=role)

    def connect(self, role: str) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn_of(role), autocommit=True)

    def count(self, queue: str) -> int:
        row = self.admin.execute(
            "SELECT count(*) FROM lonnymq.messages WHERE queue = %s", (queue,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self.admin.close()
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
            for role in (self.a, self.b):
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    # Outside Spark every stage is partition 0's first attempt.
    monkeypatch.setattr(_write, "task", lambda: (0, 0))
    s = Site()
    try:
        yield s
    finally:
        s.close()


def write(site: Site, role: str, queue: str, key: str, n: int) -> int:
    """A keyed batch write of ``n`` rows as ``role``, step by step as Spark's driver and one
    task run it; returns how many messages its commit created."""
    opts = Options.parse({"dsn": site.dsn_of(role), "queue": queue})
    write_id = _write.write_id_for(key)
    if _write.job_committed(opts, write_id):
        return 0
    run = _write.open_run(opts, "batch")
    rows = [{"content": f"{role}-{i}"} for i in range(n)]
    staged = _write.stage_partition(opts, run, write_id, _write.row_chunks(rows, MAPPING))
    done = _write.publish(opts, MAPPING, run, write_id, [staged])
    _write.close_run(opts, run)
    return done.created


def bookkeeping_schemas(conn: psycopg.Connection[Any]) -> list[str]:
    """Every Spark bookkeeping schema of the database, whoever owns it."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'lonnymq\\_spark%'"
        ).fetchall()
    ]


def attempt(conn: psycopg.Connection[Any], statement: sql.Composed) -> bool:
    """Runs an attacker's statement; False when the server refused it for lack of rights."""
    try:
        conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True


def test_a_role_cannot_forge_another_roles_commit_record(site: Site) -> None:
    assert write(site, site.a, "qa", "first", 2) == 2
    assert write(site, site.b, "qb", "first", 2) == 2
    # A marks B's next keyed write as committed, in every bookkeeping schema it can reach.
    refused = 0
    with site.connect(site.a) as a:
        for schema in bookkeeping_schemas(a):
            forged = sql.SQL(
                "INSERT INTO {}.write_job (queue, write_id, partitions, created, deduplicated,"
                " dropped) VALUES ('qb', 'key:nightly', 1, 0, 0, 0)"
            ).format(sql.Identifier(schema))
            refused += not attempt(a, forged)
    assert refused == 1  # B's schema; A's own takes the row, which concerns A alone
    assert write(site, site.b, "qb", "nightly", 3) == 3
    assert site.count("qb") == 5


@pytest.mark.parametrize(
    "attack",
    [
        "DELETE FROM {s}.write_partition; DELETE FROM {s}.write_job",
        "TRUNCATE {s}.write_job, {s}.write_partition",
        "UPDATE {s}.write_job SET queue = queue || '-moved'",
    ],
)
def test_a_role_cannot_delete_or_move_another_roles_commit_record(site: Site, attack: str) -> None:
    assert write(site, site.a, "qa", "first", 2) == 2
    assert write(site, site.b, "qb", "nightly", 6) == 6
    refused = 0
    with site.connect(site.a) as a:
        for schema in bookkeeping_schemas(a):
            refused += not attempt(a, sql.SQL(attack).format(s=sql.Identifier(schema)))
    assert refused == 1
    # B's retry of the committed write still finds its record: nothing is published twice.
    assert write(site, site.b, "qb", "nightly", 6) == 0
    assert site.count("qb") == 6


def test_no_trigger_of_another_role_runs_in_a_spark_roles_session(site: Site) -> None:
    assert write(site, site.a, "qa", "first", 2) == 2
    assert write(site, site.b, "qb", "first", 2) == 2
    with site.connect(site.a) as a:
        # A's trigger function logs who runs it into a table everyone may write.
        a.execute(
            "CREATE SCHEMA spy; GRANT USAGE ON SCHEMA spy TO PUBLIC;"
            " CREATE TABLE spy.seen (who text); GRANT INSERT ON spy.seen TO PUBLIC;"
            " CREATE FUNCTION spy.log() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN INSERT INTO spy.seen VALUES (current_user); RETURN NULL; END$$;"
            " GRANT EXECUTE ON FUNCTION spy.log() TO PUBLIC"
        )
        placed = 0
        for schema in bookkeeping_schemas(a):
            for table in ("write_job", "write_attempt", "write_partition", "write_run"):
                placed += attempt(
                    a,
                    sql.SQL(
                        "CREATE TRIGGER spy AFTER INSERT OR UPDATE OR DELETE ON {}"
                        " FOR EACH STATEMENT EXECUTE FUNCTION spy.log()"
                    ).format(sql.Identifier(schema, table)),
                )
        assert placed == 4  # on A's own tables only
    assert write(site, site.b, "qb", "nightly", 3) == 3
    seen = {r[0] for r in site.admin.execute("SELECT who FROM spy.seen").fetchall()}
    assert site.b not in seen


def test_a_schema_squatted_before_first_use_is_refused(site: Site) -> None:
    # A, with nothing but CREATE on the database, prepares B's schema before B uses Spark:
    # the very layout, open to everyone.
    victim = schema_for(site.b)
    _bookkeeping.install(site.dsn_of(site.a))
    with site.connect(site.a) as a:
        a.execute(
            sql.SQL(
                "ALTER SCHEMA {own} RENAME TO {victim}; GRANT ALL ON SCHEMA {victim} TO PUBLIC;"
                " GRANT ALL ON ALL TABLES IN SCHEMA {victim} TO PUBLIC"
            ).format(own=sql.Identifier(schema_for(site.a)), victim=sql.Identifier(victim))
        )
    with pytest.raises(UnsafeBookkeeping, match="owned by another role"):
        write(site, site.b, "qb", "nightly", 3)
    assert site.count("qb") == 0


@pytest.mark.parametrize(
    ("grant", "refusal"),
    [
        ("GRANT CREATE ON SCHEMA {schema} TO PUBLIC", "may create in schema"),
        ("GRANT INSERT ON {schema}.write_job TO {other}", "may write write_job"),
        ("GRANT DELETE ON {schema}.write_partition TO PUBLIC", "may write write_partition"),
        ("GRANT TRIGGER ON {schema}.write_run TO {other}", "may write write_run"),
        ("GRANT UPDATE (queue) ON {schema}.write_job TO {other}", "may write write_job"),
        (
            "CREATE TABLE {schema}.planted (x int); ALTER TABLE {schema}.planted OWNER TO {other}",
            "planted belong to another role",
        ),
        (
            "CREATE FUNCTION {schema}.now() RETURNS int LANGUAGE sql AS 'SELECT 1';"
            " ALTER FUNCTION {schema}.now() OWNER TO {other}",
            "now belong to another role",
        ),
    ],
)
def test_a_schema_others_may_write_is_refused(site: Site, grant: str, refusal: str) -> None:
    assert write(site, site.b, "qb", "first", 2) == 2
    schema = sql.Identifier(schema_for(site.b))
    site.admin.execute(sql.SQL(grant).format(schema=schema, other=sql.Identifier(site.a)))
    with pytest.raises(UnsafeBookkeeping, match=refusal):
        write(site, site.b, "qb", "nightly", 3)
    assert site.count("qb") == 2


def _old_layout(site: Site, owner: str, writers: str) -> None:
    """1.12's shared schema, created by ``owner``, with a committed keyed write of queue q
    and an uncommitted micro-batch of stream s1 in it, its tables writable by ``writers``
    as 1.12's docs had them granted to every Spark role."""
    with site.connect(owner) as conn:
        conn.execute(LAYOUT_1_12.read_text())
        conn.execute(
            "INSERT INTO lonnymq_spark.write_job"
            " (queue, write_id, partitions, created, deduplicated, dropped)"
            " VALUES ('q', 'key:nightly', 1, 4, 0, 0);"
            "INSERT INTO lonnymq_spark.write_partition"
            " (queue, write_id, partition_id, task_attempt, rows, created)"
            " VALUES ('q', 'key:nightly', 0, 0, 4, 4);"
            "INSERT INTO lonnymq_spark.stream_batch (stream_id, batch, queue, messages)"
            " VALUES ('s1', 7, 'events', 1);"
            "INSERT INTO lonnymq_spark.stream_delivery"
            " (stream_id, batch, ord, id, content, num_attempts, recovered)"
            " VALUES ('s1', 7, 0, 42, '\\x6869', 1, false);"
            "GRANT USAGE ON SCHEMA lonnymq_spark TO PUBLIC;"
            "GRANT SELECT ON ALL TABLES IN SCHEMA lonnymq_spark TO PUBLIC"
        )
        conn.execute(
            sql.SQL(
                "GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA lonnymq_spark TO {}"
            ).format(sql.Identifier(writers))
        )


def test_the_old_layout_is_taken_over_by_its_owner_only(site: Site) -> None:
    _old_layout(site, site.a, site.a)
    # A's keyed write committed under 1.12 stays committed: its re-run publishes nothing.
    assert write(site, site.a, "q", "nightly", 4) == 0
    with site.connect(site.a) as a:
        own = sql.Identifier(schema_for(site.a))
        assert a.execute(sql.SQL("SELECT version FROM {}.version").format(own)).fetchall() == [
            (_bookkeeping.VERSION,)
        ]
        assert a.execute(
            sql.SQL("SELECT stream_id, batch, messages FROM {}.stream_batch").format(own)
        ).fetchall() == [("s1", 7, 1)]
        assert a.execute(
            sql.SQL("SELECT id, content FROM {}.stream_delivery").format(own)
        ).fetchall() == [(42, b"hi")]
    # B did not own the old schema: A could have written anything in it, so B takes none of
    # it (and the same key of B's is a write of its own).
    assert write(site, site.b, "q", "nightly", 3) == 3
    assert site.count("q") == 3


def test_a_layout_this_version_does_not_know_is_refused(site: Site) -> None:
    assert write(site, site.b, "qb", "first", 2) == 2
    with site.connect(site.b) as b:
        b.execute(
            sql.SQL("UPDATE {}.version SET version = version + 1").format(
                sql.Identifier(schema_for(site.b))
            )
        )
    with pytest.raises(UnsafeBookkeeping, match="upgrade lonnymq"):
        write(site, site.b, "qb", "nightly", 3)
    assert site.count("qb") == 2


def test_an_old_layout_other_roles_could_write_is_not_taken_over(site: Site) -> None:
    _old_layout(site, site.a, site.b)
    # B could have forged the record: A's re-run of the key publishes.
    assert write(site, site.a, "q", "nightly", 4) == 4
    assert site.count("q") == 4


def test_an_administrator_installs_for_a_role_without_create(site: Site) -> None:
    site.admin.execute(
        sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(
            sql.Identifier(DATABASE), sql.Identifier(site.b)
        )
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        write(site, site.b, "qb", "first", 2)
    assert _bookkeeping.install(site.dsn, role=site.b) == schema_for(site.b)
    owners = site.admin.execute(
        "SELECT DISTINCT pg_get_userbyid(c.relowner) FROM pg_class c"
        " WHERE c.relnamespace = %s::regnamespace",
        (schema_for(site.b),),
    ).fetchall()
    assert owners == [(site.b,)]
    assert write(site, site.b, "qb", "first", 2) == 2


# Default privileges of the Spark role (in pg_default_acl) that grant another role ({b}) or
# PUBLIC rights on what the role creates: its schema, its tables, their sequences.
DEFAULTS = [
    "ALTER DEFAULT PRIVILEGES FOR ROLE {a} GRANT INSERT, UPDATE, DELETE ON TABLES TO {b};"
    " ALTER DEFAULT PRIVILEGES FOR ROLE {a} GRANT USAGE ON SCHEMAS TO {b}",
    "ALTER DEFAULT PRIVILEGES FOR ROLE {a} GRANT ALL ON TABLES TO PUBLIC;"
    " ALTER DEFAULT PRIVILEGES FOR ROLE {a} GRANT ALL ON SEQUENCES TO PUBLIC",
    "ALTER DEFAULT PRIVILEGES FOR ROLE {a} GRANT USAGE, CREATE ON SCHEMAS TO {b}",
    "CREATE SCHEMA {s} AUTHORIZATION {a};"
    " ALTER DEFAULT PRIVILEGES FOR ROLE {a} IN SCHEMA {s} GRANT ALL ON TABLES TO {b}",
]
DEFAULT_IDS = ["tables-to-other", "tables-to-public", "schemas-to-other", "in-schema"]


def set_defaults(site: Site, defaults: str) -> None:
    site.admin.execute(
        sql.SQL(defaults).format(
            a=sql.Identifier(site.a),
            b=sql.Identifier(site.b),
            s=sql.Identifier(schema_for(site.a)),
        )
    )


def others_rights(site: Site) -> list[str]:
    """What B or PUBLIC may do to A's schema and anything in it beyond reading, by the
    server's own privilege checks."""
    rows = site.admin.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,"
        " (VALUES (%(b)s), ('public')) r (role)"
        " WHERE n.nspname = %(s)s AND CASE c.relkind"
        "  WHEN 'S' THEN has_sequence_privilege(r.role, c.oid, 'USAGE, UPDATE')"
        "  WHEN 'i' THEN false"
        "  ELSE has_table_privilege(r.role, c.oid,"
        "   'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') END"
        " UNION ALL SELECT 'schema ' || n.nspname FROM pg_namespace n, (VALUES (%(b)s),"
        " ('public')) r (role) WHERE n.nspname = %(s)s AND has_schema_privilege(r.role, n.oid,"
        " 'CREATE')",
        {"b": site.b, "s": schema_for(site.a)},
    ).fetchall()
    return sorted(r[0] for r in rows)


@pytest.mark.parametrize("defaults", DEFAULTS, ids=DEFAULT_IDS)
def test_default_privileges_give_no_other_role_the_bookkeeping(site: Site, defaults: str) -> None:
    set_defaults(site, defaults)
    # The first use and every later one agree: the schema is made the role's alone.
    for _ in range(2):
        with _bookkeeping.connect(site.dsn_of(site.a), autocommit=True) as conn:
            _bookkeeping.ensure_installed(conn)
        assert others_rights(site) == []
    assert write(site, site.a, "qa", "first", 2) == 2
    snapshot = _read.plan(Options.parse({"dsn": site.dsn_of(site.a), "num_partitions": "2"}))
    assert snapshot[0].snapshot is not None  # a read_<id> table, made the role's alone too
    assert others_rights(site) == []
    assert write(site, site.a, "qa", "second", 2) == 2


@pytest.mark.parametrize("defaults", DEFAULTS[:2], ids=DEFAULT_IDS[:2])
def test_default_privileges_let_no_other_role_stage_rows(site: Site, defaults: str) -> None:
    set_defaults(site, defaults)
    # A's schema readable by B (which the check allows), so only the table's rights count.
    _bookkeeping.install(site.dsn_of(site.a))
    site.admin.execute(
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(schema_for(site.a)), sql.Identifier(site.b)
        )
    )
    opts = Options.parse({"dsn": site.dsn_of(site.a), "queue": "qa"})
    write_id = _write.write_id_for("nightly")
    run = _write.open_run(opts, "batch")
    rows = [{"content": f"a-{i}"} for i in range(2)]
    staged = _write.stage_partition(opts, run, write_id, _write.row_chunks(rows, MAPPING))
    with site.connect(site.b) as b:
        # A row of B's among A's staged ones, which A's commit would publish as A's.
        forged = sql.SQL("INSERT INTO {} (attempt, ord, content) VALUES ({}, 2, 'b')").format(
            sql.Identifier(schema_for(site.a), run.table), sql.Literal(staged.attempt_id)
        )
        assert not attempt(b, forged)
    assert _write.publish(opts, MAPPING, run, write_id, [staged]).created == 2
    _write.close_run(opts, run)
    assert site.count("qa") == 2
