"""The docs name only what exists: every KVF_ name in README.md and docs/ is a declared setting
(include/kvfabric/settings.def), a C API constant (include/, codes.h's X-macros included), a build option
(CMakeLists.txt), or a variable the Python package or a tool (tools/) reads; and every flag they give a
`kvfabric` command is one its --help lists."""

import glob
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
NAME = re.compile(r"\bKVF_[A-Z0-9_]*[A-Z0-9]\b(?!\*)")


def read(pattern: str) -> str:
    return "".join(open(p, errors="replace").read() for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def pages() -> list:
    """README.md and every page under docs/, design notes and results included."""
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [os.path.join(ROOT, "README.md"), *docs]


def known_names() -> set:
    text = (
        read("include/**/*.h")
        + read("include/**/*.def")
        + read("CMakeLists.txt")
        + read("python/kvfabric/**/*.py")
        + read("tools/**/*.py")
    )
    names = set(NAME.findall(text))
    codes = read("include/kvfabric/codes.h")
    names |= {"KVF_" + c for c in re.findall(r"X\(\d+, \w+, (\w+),", codes)}
    return names


def test_every_kvf_name_the_docs_use_exists():
    docs = {p: open(p).read() for p in pages()}
    known = known_names()
    unknown = sorted(
        {(os.path.relpath(p, ROOT), n) for p, text in docs.items() for n in NAME.findall(text) if n not in known}
    )
    assert not unknown, f"names the docs use and nothing declares: {unknown}"


def test_the_check_catches_a_name_nothing_declares():
    assert "KVF_STORE_POOL_BYTES" in known_names()
    assert "KVF_EINVAL" in known_names()
    assert "KVF_STORE_POOL_SIZE" not in known_names()


# "kvfabric SUBCOMMAND" and what follows it on its line (or its continued lines).
COMMAND = re.compile(r"kvfabric ([a-z][a-z-]+)((?:[ \t]+(?:\\\n[ \t]*)?[^\s`]+)*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*)")


def test_every_flag_the_docs_give_a_kvfabric_command_exists():
    used = set()
    for path in pages():
        for m in COMMAND.finditer(open(path).read()):
            used |= {(m.group(1), flag, os.path.relpath(path, ROOT)) for flag in FLAG.findall(m.group(2))}
    assert len(used) > 10, "the pattern found too few flags to check anything"
    helps, missing = {}, []
    for command, flag, path in sorted(used):
        if command not in helps:
            r = subprocess.run(
                [sys.executable, "-m", "kvfabric", command, "--help"], capture_output=True, text=True, timeout=60
            )
            helps[command] = r.stdout if r.returncode == 0 else ""
        if flag not in helps[command]:
            missing.append((path, f"kvfabric {command} {flag}"))
    assert not missing, f"flags the docs give that the commands do not list: {missing}"
