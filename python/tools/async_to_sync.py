"""Generates the synchronous client from the asyncio one, as psycopg does.

    python python/tools/async_to_sync.py          rewrite the generated files
    python python/tools/async_to_sync.py --check  exit 1 if one of them is stale

``aqueue.py`` (``AsyncQueue``), ``amessage.py`` (``AsyncMessage``) and ``aworker.py``
(``AsyncWorker``) are the source; ``queue.py``, ``message.py`` and ``worker.py`` are written
from them, so the two clients cannot drift.
The conversion works on tokens, so comments and docstrings are kept:

- ``async`` before ``def``, ``with`` and ``for`` is dropped, and so is every ``await``;
- names of the asyncio API become their synchronous twins (``NAMES``), in code and in
  ````double-backticked```` spans of comments and docstrings;
- a line ending in the comment ``# ASYNC`` exists only in the asyncio client;
- ``if True:  # ASYNC`` keeps its body in the asyncio client only, and its ``else:`` body
  (if any) becomes the synchronous code.

The result is formatted with ruff, so it passes the lint gate as it is written.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "lonnymq"

# Source (asyncio) file -> generated (synchronous) file, inside the package.
FILES = {"aqueue.py": "queue.py", "amessage.py": "message.py", "aworker.py": "worker.py"}

# asyncio names -> their synchronous twins.
NAMES = {
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncHandler": "Handler",
    "AsyncIterator": "Iterator",
    "AsyncMessage": "Message",
    "AsyncQueue": "Queue",
    "AsyncWorker": "Worker",
    "PromptAsyncPool": "PromptPool",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "amessage": "message",
    "aqueue": "queue",
    "aworker": "worker",
    "asynccontextmanager": "contextmanager",
}

MARKER = "# ASYNC"
IF_ASYNC = re.compile(r"^(?P<indent>\s*)if True:\s*# ASYNC\b.*$")
BACKTICKED = re.compile(r"``[^`]*``")
NAME_WORD = re.compile(r"\b(" + "|".join(map(re.escape, NAMES)) + r")\b")


def header(source: str) -> str:
    return (
        f"# WARNING: generated from {source} by python/tools/async_to_sync.py: do not edit.\n"
        f"# Change {source} and run the script; a test fails while this file is stale.\n\n"
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Index of the first line after the block whose first body line is ``start``."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    # Trailing blank lines belong to what follows.
    while end > start and not lines[end - 1].strip():
        end -= 1
    return end


def drop_async_only(text: str) -> str:
    """Removes ``# ASYNC`` lines and ``if True:  # ASYNC`` blocks (keeping their else)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        match = IF_ASYNC.match(line)
        if match:
            indent = len(match.group("indent"))
            i = _block_end(lines, i + 1, indent)
            rest = i
            while rest < len(lines) and not lines[rest].strip():
                rest += 1
            is_else = rest < len(lines) and lines[rest].strip() == "else:"
            if is_else and _indent(lines[rest]) == indent:
                end = _block_end(lines, rest + 1, indent)
                body = lines[rest + 1 : end]
                width = min(_indent(b) for b in body if b.strip()) - indent
                out.extend(b[width:] if b.strip() else b for b in body)
                i = end
            continue
        if line.rstrip().endswith(MARKER):
            i += 1
            continue
        out.append(line)
        i += 1
    return "".join(out)


def _rename_in_text(text: str) -> str:
    return BACKTICKED.sub(lambda m: NAME_WORD.sub(lambda n: NAMES[n.group(1)], m.group(0)), text)


def unasync_tokens(text: str) -> str:
    """Drops ``async``/``await`` and renames asyncio names, token by token."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []
    for index, tok in enumerate(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if tok.type == tokenize.NAME and tok.string == "await":
            edits.append((tok.start, following.start if following else tok.end, ""))
        elif (
            tok.type == tokenize.NAME
            and tok.string == "async"
            and following is not None
            and following.string in ("def", "with", "for")
        ):
            edits.append((tok.start, following.start, ""))
        elif tok.type == tokenize.NAME and tok.string in NAMES:
            edits.append((tok.start, tok.end, NAMES[tok.string]))
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            renamed = _rename_in_text(tok.string)
            if renamed != tok.string:
                edits.append((tok.start, tok.end, renamed))
    lines = text.splitlines(keepends=True)
    # Apply from the end so earlier positions stay valid; no edit spans lines except a
    # string's, which is replaced whole.
    for (srow, scol), (erow, ecol), new in reversed(edits):
        before = lines[srow - 1][:scol]
        after = lines[erow - 1][ecol:]
        lines[srow - 1 : erow] = [before + new + after]
    return "".join(lines)


def ruff_format(text: str, filename: str) -> str:
    """The text as ruff would format it (python/pyproject.toml's [tool.ruff] applies)."""
    path = str(PACKAGE / filename)
    fixed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--fix", "--select", "I,F401", "--quiet",
         "--stdin-filename", path, "-"],
        input=text, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", path, "-"],
        input=fixed, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return formatted.stdout


def generate(source: str, target: str) -> str:
    text = (PACKAGE / source).read_text()
    return ruff_format(header(source) + unasync_tokens(drop_async_only(text)), target)


def main(argv: list[str]) -> int:
    check = argv[1:] == ["--check"]
    if argv[1:] not in ([], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    stale = []
    for source, target in FILES.items():
        text = generate(source, target)
        path = PACKAGE / target
        if path.exists() and path.read_text() == text:
            continue
        if check:
            stale.append(target)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(
            f"stale: {', '.join(stale)}; run python/tools/async_to_sync.py and commit",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
