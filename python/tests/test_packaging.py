"""The package's version follows the extension's, and a built wheel carries the extension
script, so `install --sql-only` works anywhere."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import lonnymq

PYTHON_DIR = Path(__file__).resolve().parent.parent


def _default_version() -> str:
    control = (PYTHON_DIR.parent / "lonnymq.control").read_text()
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_package_version_follows_the_extension() -> None:
    # A client release speaks the SQL API of the extension release with its major.minor.
    major_minor = lonnymq.__version__.split(".")[:2]
    assert major_minor == _default_version().split("."), (
        f"lonnymq.__version__ {lonnymq.__version__} does not follow lonnymq.control's "
        f"default_version {_default_version()}"
    )


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
    # pyproject.toml takes the version from lonnymq.__version__: the wheel must say so too.
    [wheel] = tmp_path.glob(f"lonnymq-{lonnymq.__version__}-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    current = f"lonnymq/sql/lonnymq--{_default_version()}.sql"
    assert current in names
    assert "lonnymq/py.typed" in names
    script = zipfile.ZipFile(wheel).read(current).decode()
    assert "FUNCTION lonnymq.message_dequeue(" in script


def test_a_checkout_installs_the_development_version_from_sql() -> None:
    # An editable install finds its script in the checkout, where the development version's
    # script is not committed: it is sql/*.sql in name order, never an older frozen script.
    from lonnymq import install

    sources = sorted((PYTHON_DIR.parent / "sql").glob("*.sql"))
    assert install._checkout_scripts() == [
        (f"lonnymq--{_default_version()}.sql", "".join(p.read_text() for p in sources))
    ]
