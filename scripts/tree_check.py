"""What the tree checks (check_layers.py, check_sizes.py) share: their command line.

A check is a function from the repository root to the lines it objects to,
and a self-test that plants what it must catch in a temporary tree.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def run(check: Callable[[Path], list[str]], self_test: Callable[[], int], failed: str, passed: str) -> int:
    """`check.py [ROOT]` prints every objection and `failed` (exit 1), or `passed`;
    `check.py --self-test` runs the self-test."""
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    bad = check(root)
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} {failed}")
        return 1
    print(passed)
    return 0
