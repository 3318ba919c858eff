"""Text from the database made safe for a terminal line.

Queue and channel names and NOTIFY payloads are chosen by whoever creates messages (any
role can NOTIFY): a newline would forge a line of output, an ANSI escape would reach the
terminal. They are printed with such characters escaped, as Python escapes them.
"""

from __future__ import annotations

import unicodedata

# Control (Cc), format (Cf: bidi overrides, zero-width) and line/paragraph separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def printable(value: object) -> str:
    """``value`` as text with every unsafe character (and the backslash) escaped."""
    out = []
    for ch in str(value):
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in UNSAFE_CATEGORIES:
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)
