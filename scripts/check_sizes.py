#!/usr/bin/env python3
"""Fails when a library file or function under src/ grows past its bound.

A file holds one object or one role: no library source or header under
src/ over MAX_FILE_LINES lines (tests, *_test.cc, are not library files).
No function defined at namespace scope over MAX_FUNCTION_LINES lines,
counted from the first line of its signature to its closing brace.
Functions are found as the project's style writes them: a signature that
starts in column 0 and a body that ends with a lone "}" in column 0.
Usage: check_sizes.py [SOURCE_DIR]; exit 1 listing every file or function
past its bound. --self-test checks the check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tree_check

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80

NOT_A_SIGNATURE = re.compile(
    r"^(#|//|/\*|\*|namespace\b|}|struct\b|class\b|enum\b|union\b|using\b|template\b|"
    r"typedef\b|extern\b|static_assert\b|[A-Z_]+\()"
)


def functions(lines: list[str]) -> list[tuple[str, int, int]]:
    """(name, first line, line count) of each function defined in column 0."""
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line or line[0].isspace() or NOT_A_SIGNATURE.match(line) or "(" not in line:
            i += 1
            continue
        # The signature runs until a line that opens the body; a declaration ends with ";" first.
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(";") or lines[j].rstrip().endswith("};"):
            i = j + 1
            continue
        if lines[j].rstrip().endswith("}"):  # a one-line body
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and lines[k].rstrip() != "}":
            k += 1
        name = re.sub(r"\(.*", "", line).split()[-1] if line.split() else line
        found.append((name, i + 1, k - i + 1))
        i = k + 1
    return found


def check(root: Path) -> list[str]:
    bad: list[str] = []
    for f in sorted((root / "src").rglob("*")):
        if f.suffix not in (".h", ".cc", ".c") or f.name.endswith("_test.cc"):
            continue
        lines = f.read_text().splitlines()
        rel = f.relative_to(root)
        if len(lines) > MAX_FILE_LINES:
            bad.append(f"{rel}: {len(lines)} lines, over {MAX_FILE_LINES}: divide it by role")
        for name, first, count in functions(lines):
            if count > MAX_FUNCTION_LINES:
                bad.append(
                    f"{rel}:{first}: {name} is {count} lines, over {MAX_FUNCTION_LINES}: "
                    "give its steps functions of their own"
                )
    return bad


def self_test() -> int:
    """The check catches a long file and a long function, and passes short ones."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "src/lib").mkdir(parents=True)
        short = "int Small(int a,\n          int b) {\n  return a + b;\n}\n"
        (root / "src/lib/ok.cc").write_text(short + "void Decl(int x);\nint One() { return 1; }\n")
        (root / "src/lib/long_test.cc").write_text("x\n" * (MAX_FILE_LINES + 5))
        if check(root):
            print("self-test: a clean tree was reported:", check(root))
            return 1
        body = "".join(f"  step({n});\n" for n in range(MAX_FUNCTION_LINES))
        (root / "src/lib/long_fn.cc").write_text(f"void Engine::Long() {{\n{body}}}\n")
        (root / "src/lib/big.h").write_text("// x\n" * (MAX_FILE_LINES + 1))
        found = check(root)
        if len(found) != 2 or "Engine::Long" not in found[1] + found[0]:
            print("self-test: expected a long file and Engine::Long, got", found)
            return 1
    print("self-test: long files and long functions are caught")
    return 0


def main() -> int:
    return tree_check.run(
        check,
        self_test,
        "file(s) or function(s) past their bounds; see scripts/check_sizes.py",
        f"sizes: every library file within {MAX_FILE_LINES} lines, every function within {MAX_FUNCTION_LINES}",
    )


if __name__ == "__main__":
    sys.exit(main())
