"""The synchronous client is generated from the asyncio one (python/tools/async_to_sync.py).

The first test fails when a generated file is stale; the others pin the conversion rules,
so a broken generator cannot pass by producing what is already committed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))

import async_to_sync  # noqa: E402


def test_generated_files_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(TOOLS / "async_to_sync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_generated_files_say_they_are_generated() -> None:
    for source, target in async_to_sync.FILES.items():
        text = (async_to_sync.PACKAGE / target).read_text()
        assert text.startswith(async_to_sync.header(source)), target
        assert "async " not in text and "await " not in text, target


def test_async_keywords_and_names_become_sync() -> None:
    source = (
        "async def run(q: AsyncQueue) -> list[AsyncMessage]:\n"
        '    """Takes from ``AsyncQueue`` (an AsyncQueue in plain text stays)."""\n'
        "    async with q._connection(None) as c:  # borrows an ``AsyncConnection``\n"
        "        cursor = await c.execute('SELECT 1')\n"
        "    return await q.dequeue(lock_ms=1)\n"
    )
    assert async_to_sync.unasync_tokens(source) == (
        "def run(q: Queue) -> list[Message]:\n"
        '    """Takes from ``Queue`` (an AsyncQueue in plain text stays)."""\n'
        "    with q._connection(None) as c:  # borrows an ``Connection``\n"
        "        cursor = c.execute('SELECT 1')\n"
        "    return q.dequeue(lock_ms=1)\n"
    )


def test_async_only_code_is_dropped_and_its_else_kept() -> None:
    source = (
        "import asyncio  # ASYNC\n"
        "if True:  # ASYNC\n"
        "    X = 1\n"
        "\n"
        "    Y = 2\n"
        "else:\n"
        "    # sync\n"
        "    X = 3\n"
        "\n"
        "\n"
        "class Q:\n"
        "    if True:  # ASYNC\n"
        "\n"
        "        def only_async(self) -> None:\n"
        "            pass\n"
        "\n"
        "    def both(self) -> None:\n"
        "        self.lock = asyncio.Lock()  # ASYNC\n"
        "        pass\n"
    )
    assert async_to_sync.drop_async_only(source) == (
        "# sync\nX = 3\n\n\nclass Q:\n\n    def both(self) -> None:\n        pass\n"
    )
