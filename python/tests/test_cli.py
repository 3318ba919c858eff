"""The ``lonnymq`` command: install (extension and --sql-only), send, status, tail, enqueue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lonnymq import Queue
from lonnymq._announce import Announcements
from lonnymq.cli.main import main

from .conftest import recreate_database
from .helpers import block_announcements, wait_for


def extension_installed(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_extension WHERE extname = 'lonnymq'"
        ).fetchone() == (1,)


def test_install_creates_the_extension(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = recreate_database("lonnymq_pytest_cli_ext")
    assert main(["--dsn", dsn, "install"]) == 0
    with psycopg.connect(dsn) as conn:
        default = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'lonnymq'"
        ).fetchone()
    assert default is not None
    assert f"extension lonnymq {default[0]} installed" in capsys.readouterr().out
    assert extension_installed(dsn)
    assert main(["--dsn", dsn, "install"]) == 0  # idempotent


def test_install_sql_only_works_without_the_extension(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dsn = recreate_database("lonnymq_pytest_cli_sql")
    assert main(["--dsn", dsn, "install", "--sql-only"]) == 0
    assert "as plain SQL" in capsys.readouterr().out
    assert not extension_installed(dsn)
    with Queue(dsn, "plain") as queue:
        queue.channel_set("t", max_concurrency=1)
        assert queue.create({"x": 1}, channel="t").status == "created"
        [message] = queue.dequeue(lock_ms=5000)
        assert message.json() == {"x": 1} and message.complete() == "completed"
        assert queue.verify() == []
    assert main(["--dsn", dsn, "install", "--sql-only"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_missing_dsn_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["status"]) == 2
    assert "DATABASE_URL" in capsys.readouterr().err


def test_send_and_status(
    dsn: str,
    queue: Queue,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", dsn)  # the environment works as well as --dsn
    queue.channel_set("acme", max_concurrency=2, release_interval_ms=100)
    assert main(["send", queue.name, "hello", "--channel", "acme", "--dedup-key", "d"]) == 0
    first = capsys.readouterr().out.split()
    assert first[0] == "created"
    assert main(["send", queue.name, "again", "--channel", "acme", "--dedup-key", "d"]) == 0
    assert capsys.readouterr().out.split() == ["deduplicated", first[1]]
    assert main(["send", queue.name, "later", "--delay-ms", "60000"]) == 0
    capsys.readouterr()
    # The common options work after the command too, as a new user types them.
    monkeypatch.delenv("DATABASE_URL")
    assert main(["status", "--queue", queue.name, "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert f"queue {queue.name}: 1 channels, 1 ready, 1 scheduled, 0 locked" in out
    acme = next(line for line in out.splitlines() if line.startswith("acme"))
    assert acme.split()[:5] == ["acme", "1", "0", "0", "2"] and "100 ms" in acme
    assert any(line.startswith("(no channel)") for line in out.splitlines())


def test_enqueue_jsonl(
    dsn: str, queue: Queue, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data.jsonl"
    lines = [{"content": {"n": n}, "channel": f"c{n % 2}"} for n in range(5)]
    data.write_text("\n".join(json.dumps(x) for x in [*lines, "plain text", [1, 2]]) + "\n")
    assert (
        main(
            [
                "--dsn",
                dsn,
                "enqueue",
                queue.name,
                "--file",
                str(data),
                "--batch-size",
                "3",
                "--channel",
                "default",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out.strip() == "7 created"
    assert "7/7" in captured.err  # the progress bar's last state
    messages = queue.dequeue(lock_ms=5000, max_messages=10)
    contents = {m.content: m.channel for m in messages}
    assert contents[b'{"n":3}'] == "c1" and contents[b"plain text"] == "default"
    assert contents[b"[1,2]"] == "default"


def test_tail_follows_events(dsn: str, queue: Queue) -> None:
    tail = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lonnymq",
            "--dsn",
            dsn,
            "tail",
            "--queue",
            queue.name,
            "--count",
            "2",
            "--timeout",
            "30",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert tail.stdout is not None
    assert tail.stdout.readline().startswith("listening")
    queue.create("x")
    [message] = queue.dequeue(lock_ms=5000)
    message.fail("boom")
    out, _ = tail.communicate(timeout=30)
    events = [line.split()[1] for line in out.splitlines()]
    assert events == ["created", "failed"]
    assert all(f"queue={queue.name}" in line for line in out.splitlines())


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "lonnymq"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=True)
    for command in ("install", "status", "send", "tail", "enqueue"):
        assert command in result.stdout


def test_sql_only_script_strips_extension_statements() -> None:
    from lonnymq.install import sql_only_script

    script: Any = sql_only_script()
    assert script.startswith("CREATE SCHEMA lonnymq;")
    assert "\\echo" not in script and "pg_extension_config_dump" not in script


def test_missing_extension_gets_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = recreate_database("lonnymq_pytest_cli_none")
    assert main(["--dsn", dsn, "status"]) == 1
    assert "Run `lonnymq install`" in capsys.readouterr().err


# -- hostile and careless use (issue 11) ------------------------------------------------------


def enqueue(dsn: str, queue: str, path: str, *extra: str) -> int:
    return main(["--dsn", dsn, "enqueue", queue, "--file", path, "--batch-size", "2", *extra])


def test_enqueue_streams_from_a_pipe(dsn: str, queue: Queue) -> None:
    """A pipe can be read only once: one named by path (here /dev/stdin, or a process
    substitution) used to be read to count lines, leaving nothing to enqueue, and the
    command exited 0."""
    lines = "\n".join(json.dumps(f"m{n}") for n in range(5)) + "\n"
    command = [sys.executable, "-m", "lonnymq", "--dsn", dsn, "enqueue", queue.name]
    result = subprocess.run(
        [*command, "--file", "/dev/stdin", "--batch-size", "2"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result
    assert result.stdout.strip() == "5 created"
    assert queue.queue_stats().ready == 5


def test_enqueue_says_what_was_committed_and_a_rerun_resumes(
    dsn: str, queue: Queue, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data.jsonl"
    good = [json.dumps({"content": f"m{n}", "channel": "c"}) for n in range(7)]
    data.write_text("\n".join([*good[:5], "{not json", *good[5:]]) + "\n")
    assert enqueue(dsn, queue.name, str(data)) == 1
    err = capsys.readouterr().err
    # Batches of two: lines 1-2 and 3-4 committed, line 5 pending with the bad line 6.
    assert "line 6:" in err and "lines 1-4 are committed (4 created)" in err, err
    assert queue.queue_stats().ready == 4
    # Fixed in place and run again: the committed batches are recognised, not repeated.
    data.write_text(
        "\n".join([*good[:5], json.dumps({"content": "fixed", "channel": "c"}), *good[5:]]) + "\n"
    )
    assert enqueue(dsn, queue.name, str(data)) == 0
    assert capsys.readouterr().out.strip() == "4 created, 4 duplicate_batch"
    contents = sorted(m.content for m in queue.dequeue(lock_ms=5000, max_messages=100))
    assert contents == sorted([f"m{n}".encode() for n in range(7)] + [b"fixed"])
    # Once more: nothing new. Another --key-prefix enqueues the same lines again on purpose.
    assert enqueue(dsn, queue.name, str(data)) == 0
    assert capsys.readouterr().out.strip() == "8 duplicate_batch"
    assert enqueue(dsn, queue.name, str(data), "--key-prefix", "again") == 0
    assert capsys.readouterr().out.strip() == "8 created"


UNSAFE_NAME = "evil\nqueue fake  999  0  0\x1b[31m\u202e"


def test_status_escapes_names(dsn: str, queue: Queue, capsys: pytest.CaptureFixture[str]) -> None:
    """A newline in a channel name forged status rows; ANSI escapes reached the terminal."""
    queue.create("x", channel=UNSAFE_NAME)
    assert main(["--dsn", dsn, "status", "--queue", queue.name]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert len(out.splitlines()) == 3  # the title, the header, one channel
    assert "evil\\nqueue fake  999  0  0\\x1b[31m\\u202e" in out


def test_announcements_renew_what_may_not_have_taken() -> None:
    book = Announcements()
    plan = book.plan(["a", "b"], 0.0)
    assert (plan.again, plan.begin, plan.gone) == ([], ["a", "b"], [])
    book.record(plan, [("a", None), ("b", 100)], 0.0)  # b: look again in 100 ms at most
    assert book.next_due() == pytest.approx(0.1)
    assert not book.plan(["a", "b"], 0.05)  # nothing to do before
    plan = book.plan(["a", "b"], 0.1)
    assert (plan.again, plan.begin, plan.gone) == (["b"], ["b"], [])
    book.record(plan, [("b", 0)], 0.1)  # ready messages answer 0 every time: back off
    assert book.next_due() == pytest.approx(0.3)
    book.record(book.plan(["a", "b"], 0.3), [("b", None)], 0.3)  # announced: done
    assert book.next_due() is None
    plan = book.plan(["b", "c"], 1.0)
    assert (plan.again, plan.begin, plan.gone) == ([], ["c"], ["a"])
    book.record(plan, [("c", None)], 1.0)
    assert book.held == {"b", "c"}


def test_tail_announces_again_without_a_gap(dsn: str, queue: Queue) -> None:
    """Announcing a queue again begins the new announcement before ending the old one:
    after every statement of the round, tail's session still holds the queue's slot (ended
    first, producers skipped their NOTIFY in between and tail missed their messages)."""
    from lonnymq.cli.tail import announce

    class Later(Announcements):  # every retry is due at once
        def plan(self, queues: Any, now: float) -> Any:
            return super().plan(queues, now + 3600)

    class Checked:  # the waiter, checked after each statement
        def __init__(self, conn: psycopg.Connection[Any], checker: psycopg.Connection[Any]):
            self.conn, self.checker, self.statements = conn, checker, 0

        def execute(self, query: Any, params: Any = None) -> Any:
            cur = self.conn.execute(query, params)
            self.statements += 1
            held = self.checker.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory'"
                " AND granted AND classid = lonnymq._waiting_lock_class()::oid"
                " AND objid = lonnymq._wait_slot(%s)::oid",
                (self.conn.info.backend_pid, queue.name),
            ).fetchone()
            assert held is not None and held[0] == 1, f"not announced after {query}"
            return cur

    queue.create("x")  # a ready message: wait_begin answers 0, so tail announces again
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as checker,
    ):
        waiter, book = Checked(conn, checker), Later()
        announce(waiter, book, [queue.name])  # type: ignore[arg-type]
        assert book.next_due() is not None
        announce(waiter, book, [queue.name])  # type: ignore[arg-type]
        assert waiter.statements == 3  # begin; begin again, end the old one


def test_tail_announces_again_until_it_takes(dsn: str, queue: Queue) -> None:
    """A wait_begin that did not get its lock did not announce tail: it tries again, and
    hears the queue's events once it does (it used to miss them for good)."""
    blocker = block_announcements(dsn, queue.name)
    tail = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lonnymq",
            "--dsn",
            dsn,
            "tail",
            "--queue",
            queue.name,
            "--count",
            "1",
            "--timeout",
            "60",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert tail.stdout is not None
    assert tail.stdout.readline().startswith("listening")  # announced while blocked
    blocker.close()
    # Producers notify once tail's announcement takes: create until one is heard.
    wait_for(lambda: queue.create("x") and tail.poll() is not None, 50, "an event heard")
    out, _ = tail.communicate(timeout=30)
    assert out.split()[1] == "created"


def test_tail_escapes_forged_payloads(dsn: str, queue: Queue) -> None:
    """Any role may NOTIFY lonnymq: a forged payload prints as one escaped line."""
    tail = subprocess.Popen(
        [sys.executable, "-m", "lonnymq", "--dsn", dsn, "tail", "--count", "3", "--timeout", "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert tail.stdout is not None
    assert tail.stdout.readline().startswith("listening")
    with psycopg.connect(dsn, autocommit=True) as conn:
        forged = json.dumps({"queue": UNSAFE_NAME, "event": "created\x1b[2J"})
        conn.execute("SELECT pg_notify('lonnymq', %s)", (forged,))
        conn.execute("SELECT pg_notify('lonnymq', %s)", ("not json\nforged line",))
        # Valid JSON nested too deep for Python's parser: a line too, not a crash.
        conn.execute("SELECT pg_notify('lonnymq', %s)", ("[" * 3000 + "]" * 3000,))
    out, _ = tail.communicate(timeout=30)
    assert "\x1b" not in out and "\u202e" not in out
    lines = out.splitlines()
    assert len(lines) == 3, lines
    assert "created\\x1b[2J" in lines[0] and "queue=evil\\nqueue fake" in lines[0]
    assert "payload=not json\\nforged line" in lines[1]
    assert "payload=[[[" in lines[2]


def test_dsn_after_the_command_wins_over_none_before(
    dsn: str, queue: Queue, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["send", queue.name, "hi", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.startswith("created ")
    assert main(["--dsn", dsn, "status", "--queue", queue.name]) == 0
    assert f"queue {queue.name}: 0 channels, 1 ready" in capsys.readouterr().out
    # Before and after: the one after the command is the one used.
    assert main(["--dsn", "host=/nonexistent", "send", queue.name, "b", "--dsn", dsn]) == 0
    assert queue.queue_stats().ready == 2


def test_status_lists_every_queue(
    dsn: str, queue: Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.create("x", channel="a")
    with Queue(dsn, queue.name + "_other") as other:
        other.create("y")
        assert main(["--dsn", dsn, "status"]) == 0
        out = capsys.readouterr().out
        assert f"queue {queue.name}: 1 channels, 1 ready" in out
        assert f"queue {other.name}: 0 channels, 1 ready" in out
        [message] = other.dequeue(lock_ms=1000)
        assert message.complete() == "completed"
