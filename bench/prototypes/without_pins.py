"""Writes, to stdout, a B.sql for lifecycle_pair.sh: lonnymq with no channel pin.

A measurement only, never a design: message_create and _pin_channel (which every single
settle calls) taken from the committed install script of the version in lonnymq.control,
with their FOR KEY SHARE row locks removed. Without them a channel_set or a sweep could
interleave with a create or a settle (docs/design.md, "Locks and their order"): unsafe.
What it bounds is the pins' whole cost on the hot path: every producer and settler of a
busy channel locks the row a dequeuer is updating, which makes each of those locks a
MultiXact. Reads the current version's script, so it follows sql/ once `make` ran.

    python bench/prototypes/without_pins.py > /tmp/nopin.sql
    PAIR_CHANNELS=1 bench/prototypes/lifecycle_pair.sh /tmp/nopin.sql 6 s16-nopin-hot
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ("_pin_channel", "message_create")


def function_text(script: str, name: str) -> str:
    """The CREATE OR REPLACE FUNCTION statement of lonnymq.NAME, through its closing $$;."""
    start = script.index(f"CREATE OR REPLACE FUNCTION lonnymq.{name}(")
    body = script.index("AS $$", start)
    return script[start : script.index("$$;", body + len("AS $$")) + len("$$;")]


def main() -> None:
    control = (ROOT / "lonnymq.control").read_text()
    match = re.search(r"default_version\s*=\s*'([^']+)'", control)
    if match is None:
        sys.exit("no default_version in lonnymq.control")
    script = (ROOT / f"lonnymq--{match.group(1)}.sql").read_text()
    print("-- Measurement only (unsafe): no FOR KEY SHARE pin on the channel row.")
    for name in FUNCTIONS:
        text = function_text(script, name)
        if "FOR KEY SHARE" not in text:
            sys.exit(f"lonnymq.{name} takes no FOR KEY SHARE lock any more: update this script")
        print(re.sub(r"\s*FOR KEY SHARE", "", text))
        print()


if __name__ == "__main__":
    main()
