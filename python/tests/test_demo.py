"""The demo (the README's first command) runs to a fully checked summary.

It runs without a terminal here, which also covers the plain-line output mode.
"""

from __future__ import annotations

import subprocess
import sys

from .conftest import recreate_database


def test_demo_finishes_with_every_check_ok() -> None:
    dsn = recreate_database("lonnymq_pytest_demo")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import psycopg, sys; "
            "psycopg.connect(sys.argv[1], autocommit=True)"
            ".execute('CREATE EXTENSION lonnymq')",
            dsn,
        ],
        check=True,
    )
    result = subprocess.run(
        [sys.executable, "-m", "lonnymq.demo", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # no ANSI redraw when stdout is not a terminal
    summary = out[out.index("Summary") :].splitlines()[1:]
    assert len(summary) >= 6 and all(line.strip().startswith("[ok]") for line in summary)
