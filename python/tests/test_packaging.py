"""A built wheel carries the extension script, so `install --sql-only` works anywhere."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parent.parent


def test_wheel_ships_the_sql_and_type_marker(tmp_path: Path) -> None:
    # setuptools builds in python/build and reuses it: start clean so nothing stale ships.
    shutil.rmtree(PYTHON_DIR / "build", ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(PYTHON_DIR),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("lonnymq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "lonnymq/sql/lonnymq--1.0.sql" in names
    assert "lonnymq/py.typed" in names
    script = zipfile.ZipFile(wheel).read("lonnymq/sql/lonnymq--1.0.sql").decode()
    assert "CREATE FUNCTION lonnymq.message_dequeue" in script
