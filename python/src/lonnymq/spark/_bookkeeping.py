"""The Spark integration's own tables, in a schema of each role's own.

The extension knows nothing about Spark; what Spark needs on top of it lives here:

- ``write_run``: one row per job that stages rows (a batch write, or a run of a streaming
  sink query), with its UNLOGGED staging table ``stage_<run id>``.
- ``write_attempt``: one row per task attempt that staged its partition into a run's table
  (rows staged under its ``attempt_id``). Nothing staged is a message yet.
- ``write_job``: one row per committed write (batch job, or streaming micro-batch), inserted
  by the driver's commit in the *same transaction* as the messages it publishes: a replayed
  job or batch whose row exists publishes nothing, however Spark partitions it.
- ``write_partition``: the attempts a committed write published, one per partition, with
  their counts (same transaction).
- ``stream_batch`` / ``stream_delivery``: the messages a streaming query dequeued into each
  micro-batch (a copy, so a replayed batch reads exactly the same rows), deleted when the
  batch commits and the messages are completed.
- ``read_snapshot``: the snapshots of batch reads with ``num_partitions > 1``: one UNLOGGED
  table ``read_<id>`` each, a copy of the rows the read returns, which every task reads its
  range of; dropped once unread for the read's ``snapshot_retention_s``.
- ``version``: one row, the layout's version.

Each role that uses Spark has its own schema, ``lonnymq_spark_<role>``, which it owns with
every table in it, and in which no other role may create or write anything. A commit record
is then the writing role's alone: no other role can forge, delete or rewrite it, nor put a
trigger or rule on its tables. (One shared schema with row-level security would scope the
rows, but every role needs CREATE in it for its staging and snapshot tables, and a role that
can create in a schema can plant a table under a name another role is about to use.)
``ensure_installed`` refuses a schema that breaks any of this: another role owns it (it was
created first by someone else) or anything in it, or another role may create in it, or may
write to, truncate, reference or put triggers on one of its tables. What Spark creates there
(the schema, its tables, each staging and snapshot table) is made private in the statement's
transaction, so that default privileges of the role (``pg_default_acl``) grant no one else
anything on it.

1.12 kept one unversioned schema, ``lonnymq_spark``, shared through grants. A role's schema,
when first created, takes over that schema's commit records and uncommitted stream batches,
so keyed writes and streaming queries carry on exactly as before; it does so only when the
role itself or a superuser owns the old schema and tables and no other role may write them:
nobody else could have forged a row there. Staged and snapshot tables of the old schema are
not taken over: a job in flight across the upgrade fails at commit, publishing nothing, and
is run again.

Created on first use, which needs CREATE on the database, under a transaction-level advisory
lock (concurrent first users would otherwise race on the catalog); an administrator may run
``install(dsn, role)`` beforehand so that the Spark role needs no CREATE on the database.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from typing import Any

import psycopg
from psycopg import sql

# Each role's schema is this prefix and the role's name (or a hash of it, see schema_for).
SCHEMA_PREFIX = "lonnymq_spark_"
# 1.12's one shared schema, whose rows a role's new schema takes over (layout 1).
LEGACY_SCHEMA = "lonnymq_spark"
# The layout ensure_installed creates, recorded in the schema's ``version`` table.
VERSION = 2

# Arbitrary advisory-lock key: serializes the creation of a role's schema.
_INSTALL_LOCK = 0x6C6D7173  # 'lmqs'

# Role names used as they are: lower-case identifiers need no quoting and hold no '%',
# which psycopg would read as a placeholder inside a statement.
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")

# The schema of each open connection's role, found once when it connects.
_schemas: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()

_DDL = """
CREATE TABLE {s}.write_job (
    queue text NOT NULL,
    write_id text NOT NULL,
    partitions integer NOT NULL,
    created bigint NOT NULL,
    deduplicated bigint NOT NULL,
    dropped bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, write_id)
);
COMMENT ON TABLE {s}.write_job IS
    'Committed Spark writes: a replay of one creates nothing.';

CREATE TABLE {s}.write_partition (
    queue text NOT NULL,
    write_id text NOT NULL,
    partition_id integer NOT NULL,
    task_attempt integer NOT NULL,
    rows bigint NOT NULL DEFAULT 0,
    created bigint NOT NULL DEFAULT 0,
    deduplicated bigint NOT NULL DEFAULT 0,
    dropped bigint NOT NULL DEFAULT 0,
    committed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, write_id, partition_id)
);
CREATE INDEX write_partition_committed_idx
    ON {s}.write_partition (committed_at);
COMMENT ON TABLE {s}.write_partition IS
    'Task attempts whose staged rows a committed Spark write published (one per partition).';

CREATE TABLE {s}.write_run (
    run_id text PRIMARY KEY,
    queue text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('batch', 'stream')),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    used_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE {s}.write_run IS
    'Spark jobs staging rows, each in its UNLOGGED table {s}.stage_<run_id>.';

CREATE TABLE {s}.write_attempt (
    attempt_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text NOT NULL,
    queue text NOT NULL,
    write_id text NOT NULL,
    partition_id integer NOT NULL,
    task_attempt integer NOT NULL,
    rows bigint NOT NULL DEFAULT 0,
    staged_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE INDEX write_attempt_write_idx
    ON {s}.write_attempt (queue, write_id);
CREATE INDEX write_attempt_run_idx ON {s}.write_attempt (run_id);
COMMENT ON TABLE {s}.write_attempt IS
    'Task attempts that staged a partition, not yet published or discarded.';

CREATE TABLE {s}.stream_batch (
    stream_id text NOT NULL,
    batch bigint NOT NULL,
    queue text NOT NULL,
    messages integer NOT NULL,
    planned_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (stream_id, batch)
);
COMMENT ON TABLE {s}.stream_batch IS
    'Micro-batches a streaming query dequeued and has not committed yet.';

CREATE TABLE {s}.stream_delivery (
    stream_id text NOT NULL,
    batch bigint NOT NULL,
    ord integer NOT NULL,
    id bigint NOT NULL,
    channel text,
    content bytea NOT NULL,
    state bytea,
    num_attempts bigint NOT NULL,
    dequeue_at timestamptz,
    recovered boolean NOT NULL,
    locked_until timestamptz,
    created_at timestamptz,
    priority integer,
    dedup_key text,
    PRIMARY KEY (stream_id, batch, ord)
);
COMMENT ON TABLE {s}.stream_delivery IS
    'Deliveries of uncommitted micro-batches: replayed batches read them, commit completes them.';

CREATE TABLE {s}.read_snapshot (
    read_id text PRIMARY KEY,
    relation text NOT NULL,
    source text NOT NULL,
    queue text,
    rows bigint NOT NULL,
    partitions integer NOT NULL,
    retention_s integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_read_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE {s}.read_snapshot IS
    'Snapshots of Spark batch reads (table relation here), dropped once unread for retention_s.';

CREATE TABLE {s}.version (version integer NOT NULL);
COMMENT ON TABLE {s}.version IS 'The layout of this schema: one row.';
"""


# The tables a role's new schema takes over from 1.12's (commit records and stream batches).
_LEGACY_TABLES = ("write_job", "write_partition", "stream_batch", "stream_delivery")


class UnsafeBookkeeping(RuntimeError):
    """The role's bookkeeping schema is not the role's alone: Spark refuses to use it."""


def schema_for(role: str) -> str:
    """The bookkeeping schema of a role: its name when plain and short enough, a hash else."""
    name = SCHEMA_PREFIX + role
    if _PLAIN.fullmatch(role) and len(name) <= 63:
        return name
    return SCHEMA_PREFIX + hashlib.sha256(role.encode()).hexdigest()[:32]


def connect(dsn: str, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection named for pg_stat_activity, so operators can tell Spark's sessions apart,
    that knows its role's schema (``schema(conn)``). The role is read outside any
    transaction, so a connection without autocommit starts with none open."""
    conn = psycopg.connect(dsn, application_name="lonnymq-spark", autocommit=True)
    try:
        schema(conn)
        conn.autocommit = autocommit
    except BaseException:
        conn.close()
        raise
    return conn


def schema(conn: psycopg.Connection[Any]) -> str:
    """The bookkeeping schema of a connection's role: a plain identifier. Found when
    ``connect`` opened it, or else now."""
    name = _schemas.get(conn)
    if name is None:
        row = conn.execute("SELECT current_user").fetchone()
        assert row is not None
        name = _schemas[conn] = schema_for(row[0])
    return name


# The tables of schema ``n`` that a role other than their owner (and ``{u}``) may change:
# write, truncate, reference or put a trigger on, by a grant on the table or on a column.
_WRITABLE = """
SELECT c.relname
FROM pg_catalog.pg_class c,
     LATERAL (SELECT c.relacl
              UNION ALL
              SELECT t.attacl FROM pg_catalog.pg_attribute t WHERE t.attrelid = c.oid) g (acl),
     pg_catalog.aclexplode(g.acl) a
WHERE c.relnamespace = n.oid AND a.grantee NOT IN (c.relowner, {u})
  AND a.privilege_type <> 'SELECT'
"""

# What makes a schema unsafe, found in the catalog (readable by every role). Another role
# owning an object, creating in the schema or writing a table could plant look-alike
# tables, rewrite commit records, or attach a trigger or rule that runs as this role.
_CHECK = """
SELECT n.nspowner = u.oid,
       EXISTS (SELECT 1 FROM pg_catalog.aclexplode(n.nspacl) a
               WHERE a.grantee <> n.nspowner AND a.privilege_type = 'CREATE'),
       (SELECT pg_catalog.string_agg(DISTINCT o.name, ', ')
        FROM (SELECT c.relname::text, c.relowner FROM pg_catalog.pg_class c
              WHERE c.relnamespace = n.oid
              UNION ALL
              SELECT p.proname::text, p.proowner FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = n.oid
              UNION ALL
              SELECT y.typname::text, y.typowner FROM pg_catalog.pg_type y
              WHERE y.typnamespace = n.oid
              UNION ALL
              SELECT r.oprname::text, r.oprowner FROM pg_catalog.pg_operator r
              WHERE r.oprnamespace = n.oid) o (name, owner)
        WHERE o.owner <> u.oid),
       (SELECT pg_catalog.string_agg(DISTINCT w.relname, ', ') FROM ({writable}) w),
       EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid),
       pg_catalog.to_regclass(pg_catalog.quote_ident(n.nspname) || '.version') IS NOT NULL
FROM pg_catalog.pg_namespace n, pg_catalog.pg_roles u
WHERE n.nspname = %s AND u.rolname = current_user
""".format(writable=_WRITABLE.format(u="u.oid"))


# The roles other than the owner granted anything on schema %(schema)s (when %(table)s is
# null) or on its table %(table)s: NULL stands for PUBLIC.
_GRANTEES = """
SELECT DISTINCT r.rolname
FROM pg_catalog.pg_namespace n
     LEFT JOIN pg_catalog.pg_class c
         ON c.relnamespace = n.oid AND (%(table)s::text IS NULL OR c.relname = %(table)s),
     LATERAL (SELECT n.nspacl, n.nspowner WHERE %(table)s::text IS NULL
              UNION ALL
              SELECT c.relacl, c.relowner) g (acl, owner),
     LATERAL pg_catalog.aclexplode(g.acl) a
     LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
WHERE n.nspname = %(schema)s AND a.grantee <> g.owner
"""


def make_private(conn: psycopg.Connection[Any], name: str, table: str | None = None) -> None:
    """Revokes what other roles were granted on the role's schema and everything in it, or on
    its ``table`` only, right after they are created: default privileges (``ALTER DEFAULT
    PRIVILEGES``, in ``pg_default_acl``) may have granted others rights on them, which would
    let them write the bookkeeping. The connection's role must own them."""
    grantees = conn.execute(_GRANTEES, {"schema": name, "table": table}).fetchall()
    if not grantees:
        return
    roles = sql.SQL(", ").join(
        sql.SQL("PUBLIC") if r is None else sql.Identifier(r) for (r,) in grantees
    )
    if table is not None:
        targets = [sql.SQL("TABLE {}").format(sql.Identifier(name, table))]
    else:
        targets = [
            sql.SQL(kind).format(sql.Identifier(name))
            for kind in ("SCHEMA {}", "ALL TABLES IN SCHEMA {}", "ALL SEQUENCES IN SCHEMA {}")
        ]
    for target in targets:
        conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(target, roles))


def _layout(conn: psycopg.Connection[Any], name: str) -> int | None:
    """The version of the role's schema: None when it does not exist, 0 when it is empty.
    Raises UnsafeBookkeeping when the schema is not the role's alone."""
    row = conn.execute(_CHECK, (name,)).fetchone()
    if row is None:
        return None
    owned, others_create, foreign, writable, populated, versioned = row
    hint = (
        f"drop schema {name} (its contents cannot be trusted) or give it, and everything"
        " in it, to this role with no write privilege for any other role; then run again"
    )
    if not owned:
        raise UnsafeBookkeeping(f"lonnymq spark: schema {name} is owned by another role: {hint}")
    if others_create:
        raise UnsafeBookkeeping(f"lonnymq spark: other roles may create in schema {name}: {hint}")
    if foreign:
        raise UnsafeBookkeeping(
            f"lonnymq spark: in schema {name}, {foreign} belong to another role: {hint}"
        )
    if writable:
        raise UnsafeBookkeeping(
            f"lonnymq spark: in schema {name}, other roles may write {writable}: {hint}"
        )
    if not populated:
        return 0
    if not versioned:
        raise UnsafeBookkeeping(f"lonnymq spark: schema {name} holds no lonnymq layout: {hint}")
    version = conn.execute(sql.SQL("SELECT version FROM {}.version").format(sql.Identifier(name)))
    found = version.fetchone()
    if found is None:
        raise UnsafeBookkeeping(f"lonnymq spark: schema {name} records no version: {hint}")
    return int(found[0])


def ensure_installed(conn: psycopg.Connection[Any]) -> None:
    """Checks the role's bookkeeping schema and creates (or upgrades) it if needed."""
    name = schema(conn)
    if _layout(conn, name) == VERSION:
        return
    with conn.transaction():
        conn.execute(
            "SELECT pg_catalog.pg_advisory_xact_lock(%s, pg_catalog.hashtext(%s))",
            (_INSTALL_LOCK, name),
        )
        version = _layout(conn, name)
        if version == VERSION:
            return
        if version not in (None, 0):
            raise UnsafeBookkeeping(
                f"lonnymq spark: schema {name} has layout {version}, this lonnymq knows"
                f" {VERSION}: upgrade lonnymq on every Spark host"
            )
        if version is None:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
                sql.Identifier(name),
                sql.Literal("Bookkeeping of the lonnymq Spark data source, of its owner's."),
            )
        )
        conn.execute(_DDL.format(s=name))
        _take_over_legacy(conn, name)
        make_private(conn, name)
        conn.execute(
            sql.SQL("INSERT INTO {}.version (version) VALUES (%s)").format(sql.Identifier(name)),
            (VERSION,),
        )
        # What was just created passes the check every later call makes, or nothing is kept.
        _layout(conn, name)


def _take_over_legacy(conn: psycopg.Connection[Any], name: str) -> None:
    """Copies the rows of 1.12's shared schema that the new layout needs, from the tables
    that the role itself or a superuser owns in a schema one of them owns, and that no
    other role may write: anyone who could have forged a row there is not trusted."""
    trusted = conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_catalog.pg_roles so ON so.oid = n.nspowner"
        " JOIN pg_catalog.pg_roles o ON o.oid = c.relowner"
        " JOIN pg_catalog.pg_roles u ON u.rolname = current_user"
        " WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind = 'r'"
        " AND (so.rolname = current_user OR so.rolsuper)"
        " AND (o.rolname = current_user OR o.rolsuper)"
        " AND pg_catalog.has_table_privilege(c.oid, 'SELECT')"
        " AND c.relname NOT IN (" + _WRITABLE.format(u="u.oid") + ")",
        (LEGACY_SCHEMA, list(_LEGACY_TABLES)),
    ).fetchall()
    for (table,) in trusted:
        columns = sql.SQL(", ").join(
            sql.Identifier(c)
            for (c,) in conn.execute(
                "SELECT a.attname FROM pg_catalog.pg_attribute a"
                " WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attnum > 0"
                " AND NOT a.attisdropped ORDER BY a.attnum",
                (f"{name}.{table}",),
            ).fetchall()
        )
        conn.execute(
            sql.SQL("INSERT INTO {new} ({columns}) SELECT {columns} FROM {old}").format(
                new=sql.Identifier(name, table),
                columns=columns,
                old=sql.Identifier(LEGACY_SCHEMA, table),
            )
        )


def install(dsn: str, role: str | None = None) -> str:
    """Creates a role's bookkeeping schema, and returns its name. As an administrator, pass
    the Spark ``role``: it then needs no CREATE on the database. The schema is created
    for it, and its tables as it (so the administrator must be a member of it)."""
    with connect(dsn, autocommit=True) as conn:
        if role is not None:
            name = schema_for(role)
            created = conn.execute(
                "SELECT pg_catalog.to_regnamespace(pg_catalog.quote_ident(%s)) IS NULL", (name,)
            ).fetchone()
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {} AUTHORIZATION {}").format(
                    sql.Identifier(name), sql.Identifier(role)
                )
            )
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
            _schemas[conn] = name
            if created is not None and created[0]:
                # Only a schema created here: one that existed is checked as it is.
                make_private(conn, name)
        ensure_installed(conn)
        return schema(conn)
