#!/usr/bin/env python3
"""Fails when a file includes a header of a layer above its own.

The layers of src/, lowest first (docs/design/engine.md, "Layers"): a folder may
include its own headers and those of the folders listed for it, nothing
else. Public headers (include/kvfabric/) sit where they are listed: the
vocabulary headers (status, settings) at the bottom, the engine API and
diagnostics with the engine, the C API with capi. The store's folders
(store/wire, store/members, ...) are layers of their own; weights/ (weight
sync) and proxy/ (the proxy queue) stand on the public engine beside the
store. Besides:
  - fabric/ reads no Settings: the engine resolves options and passes them;
  - nothing under src/ or tools/ includes test code (tests/);
  - the Python binding (python/src) includes public headers only (and its
    own headers beside it).
Usage: check_layers.py [SOURCE_DIR]; exit 1 listing every violation.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tree_check

PUBLIC = {
    "kvfabric/status.h": "vocabulary",
    "kvfabric/codes.h": "vocabulary",
    "kvfabric/settings.h": "settings",
    "kvfabric/settings.def": "settings",
    "kvfabric/stats.h": "stats",
    "kvfabric/engine.h": "api",
    "kvfabric/diagnostics.h": "api",
    "kvfabric/store.h": "store_api",
    "kvfabric/store_stats.h": "store_api",
    "kvfabric/weights.h": "weights_api",
    "kvfabric/proxy.h": "proxy_api",
    "kvfabric/proxy_ring.h": "proxy_api",
    "kvfabric.h": "c_api",
}

# What every folder of the store may use.
STORE_BELOW = {"vocabulary", "settings", "common", "net", "metadata", "stats", "api", "store_api", "metrics"}

# folder (or public group) -> what it may include besides itself
ALLOWED = {
    "common": {"vocabulary", "settings"},
    "net": {"vocabulary", "common"},
    "fabric": {"vocabulary", "common"},
    "memory": {"vocabulary", "common", "fabric"},
    "metadata": {"vocabulary", "settings", "common", "net"},
    "topology": {"vocabulary", "common", "fabric"},
    "metrics": {"vocabulary", "settings", "common", "stats", "api", "store_api"},
    "engine": {
        "vocabulary",
        "settings",
        "common",
        "net",
        "fabric",
        "memory",
        "metadata",
        "topology",
        "stats",
        "api",
        "metrics",
    },
    # The store's own folders: what store processes share (wire), who is in
    # the store (members), how pages move (mover), then the two roles, which
    # never include each other; store/ itself assembles them into a Store.
    "store/wire": STORE_BELOW,
    "store/members": STORE_BELOW | {"store/wire"},
    "store/mover": STORE_BELOW | {"store/wire"},
    "store/node": STORE_BELOW | {"store/wire", "store/mover"},
    "store/client": STORE_BELOW | {"store/wire", "store/members", "store/mover"},
    "store": STORE_BELOW | {"store/wire", "store/members", "store/mover", "store/node", "store/client"},
    # Weight sync: the engine's public API below it, never the store.
    "weights": {"vocabulary", "settings", "common", "net", "stats", "api", "weights_api"},
    # The proxy queue: the engine's public API below it, nothing beside it.
    "proxy": {"vocabulary", "settings", "common", "stats", "api", "proxy_api"},
    "capi": {"vocabulary", "settings", "stats", "api", "store_api", "weights_api", "c_api"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_include(path: str) -> str | None:
    if path in PUBLIC:
        return PUBLIC[path]
    parts = path.split("/")
    head = parts[0]
    if head == "store" and len(parts) > 2:
        return "/".join(parts[:2])
    if head in ALLOWED:
        return head
    if head == "tests":
        return "tests"
    return None  # tools/..., third-party or same-directory headers


def check(root: Path) -> list[str]:
    bad: list[str] = []
    for f in sorted((root / "src").rglob("*")):
        if f.suffix not in (".h", ".cc", ".c") or f.name.endswith("_test.cc"):
            continue
        parts = f.relative_to(root / "src").parts
        layer = "/".join(parts[:2]) if parts[0] == "store" and len(parts) > 2 else parts[0]
        allowed = ALLOWED.get(layer)
        if allowed is None:
            bad.append(f"{f.relative_to(root)}: folder src/{layer} has no place in the layer table of {__file__}")
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = layer_of_include(m.group(1))
            if target is None or target == layer or target in allowed:
                continue
            bad.append(
                f"{f.relative_to(root)}:{n}: src/{layer} includes {m.group(1)} ({target}), "
                f"a layer it may not use (allowed: {', '.join(sorted(allowed))})"
            )
    for f in sorted((root / "tools").rglob("*")):
        if f.suffix not in (".h", ".cc"):
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1).startswith("tests/"):
                bad.append(f"{f.relative_to(root)}:{n}: tools include test code ({m.group(1)})")
    for f in sorted((root / "python" / "src").rglob("*")):
        if f.suffix not in (".h", ".cc"):
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) not in PUBLIC and not (f.parent / m.group(1)).exists():
                bad.append(
                    f"{f.relative_to(root)}:{n}: the Python binding includes {m.group(1)}; "
                    "use the public headers (include/kvfabric/)"
                )
    return bad


def self_test() -> int:
    """The check catches what it is for: a tree with one upward include."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for sub in ("src/fabric", "src/engine", "src/store/node", "src/store/client", "tools/bench", "python/src"):
            (root / sub).mkdir(parents=True)
        (root / "src/engine/ok.cc").write_text('#include "fabric/rail.h"\n#include "kvfabric/engine.h"\n')
        (root / "src/fabric/rail.h").write_text('#include "common/log.h"\n')
        (root / "src/store/client/c.cc").write_text('#include "store/wire/messages.h"\n')
        if check(root):
            print("self-test: a clean tree was reported")
            return 1
        (root / "src/fabric/up.cc").write_text('#include "engine/poster.h"\n')
        (root / "tools/bench/b.cc").write_text('#include "tests/support/pattern.h"\n')
        (root / "python/src/core.cc").write_text('#include "fabric/rail.h"\n')
        (root / "src/store/node/n.cc").write_text('#include "store/client/store_client.h"\n')
        found = check(root)
        if len(found) != 4:
            print("self-test: expected 4 violations, got", found)
            return 1
    print("self-test: upward, sideways (store node to client), test-code and private includes are caught")
    return 0


def main() -> int:
    return tree_check.run(
        check,
        self_test,
        "include(s) break the layering; see the table in scripts/check_layers.py",
        "layering: every include points to the same or a lower layer",
    )


if __name__ == "__main__":
    sys.exit(main())
