"""scripts/lib.sh picks the cluster of the checkout it belongs to.

A shell that sourced another checkout's lib.sh carries that checkout's data directory in
LONNYMQ_PGDATA (and its default in LONNYMQ_PGDATA_DEFAULT). Run from such a shell, this
checkout's scripts must still use their own cluster; a directory the caller chose is kept.
"""

from __future__ import annotations

import os
import subprocess

from .conftest import ROOT


def data_dir(**env: str) -> str:
    """LONNYMQ_PGDATA as lib.sh leaves it, sourced with env over a clean environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LONNYMQ_PG", "PG"))}
    done = subprocess.run(
        ["bash", "-c", '. scripts/lib.sh && printf %s "$LONNYMQ_PGDATA"'],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_another_checkouts_default_is_not_inherited() -> None:
    other = "/elsewhere/lonnymq/.pgdata"
    assert data_dir(LONNYMQ_PGDATA=other, LONNYMQ_PGDATA_DEFAULT=other) == f"{ROOT}/.pgdata"
    in_16 = data_dir(LONNYMQ_PGDATA=other, LONNYMQ_PGDATA_DEFAULT=other, LONNYMQ_PG="16")
    assert in_16 == f"{ROOT}/.pgdata-16"


def test_a_chosen_data_directory_is_kept() -> None:
    assert data_dir(LONNYMQ_PGDATA="/srv/mine") == "/srv/mine"
    chosen = data_dir(LONNYMQ_PGDATA="/srv/mine", LONNYMQ_PGDATA_DEFAULT="/elsewhere/.pgdata")
    assert chosen == "/srv/mine"
    assert data_dir() == f"{ROOT}/.pgdata"
