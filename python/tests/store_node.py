"""A store node for the Python tests: an engine and a kvfabric.Store with a
pool, in its own process.

    python store_node.py PROTOCOL LISTEN MEMBERS

Prints one JSON line {"name", "segment", "pid"}, then serves until stdin
closes or says "quit"; a line "stats" is answered with the node's counters
as one JSON line.
"""

import json
import os
import sys

import kvfabric


def serve(started: dict, close, stats=None) -> None:
    """Says `started` on one JSON line, waits until stdin closes or says "quit", then calls `close`;
    answers "stats" with stats() on one JSON line."""
    print(json.dumps(started), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        if line.strip() == "stats" and stats is not None:
            print(json.dumps(stats()), flush=True)
    close()


def main() -> None:
    protocol, listen, members = sys.argv[1], sys.argv[2], sys.argv[3]
    with kvfabric.Engine(protocol=protocol, settings={"KVF_LOG_LEVEL": "error"}) as engine:
        store = kvfabric.Store(
            engine,
            pool_bytes=32 << 20,
            members=members,
            listen=listen,
            settings={"KVF_STORE_DEADLINE_MS": 2000, "KVF_STORE_DOWN_RETRY_MS": 300},
        )
        serve({"name": store.name, "segment": engine.name, "pid": os.getpid()}, store.close, store.stats)


if __name__ == "__main__":
    main()
