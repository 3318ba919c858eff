"""Build hook: put the extension script inside the package.

`lonnymq install --sql-only` must work from a wheel installed far from this checkout, so
build_py copies the repository's versioned script (built by the top-level Makefile from
sql/*.sql) into lonnymq/sql/. Everything else lives in pyproject.toml.
"""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

REPO = Path(__file__).resolve().parent.parent


def default_version() -> str:
    control = (REPO / "lonnymq.control").read_text()
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    if match is None:
        raise RuntimeError("lonnymq.control has no default_version")
    return match.group(1)


def extension_script() -> tuple[str, str] | None:
    """(file name, text) of the install script, or None outside a checkout (e.g. an sdist)."""
    if not (REPO / "lonnymq.control").exists():
        return None
    name = f"lonnymq--{default_version()}.sql"
    built = REPO / name
    if built.exists():
        return name, built.read_text()
    # Not built yet: concatenate the sources in order, exactly as the Makefile does.
    parts = sorted((REPO / "sql").glob("*.sql"))
    return name, "".join(p.read_text() for p in parts)


class BuildPyWithSql(build_py):
    def run(self) -> None:
        super().run()
        script = extension_script()
        if script is None:
            return
        target = Path(self.build_lib) / "lonnymq" / "sql" / script[0]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(script[1])


setup(cmdclass={"build_py": BuildPyWithSql})
