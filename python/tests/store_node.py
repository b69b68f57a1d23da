"""A store node for the Python tests: an engine and a kvfabric.Store with a
pool, in its own process.

    python store_node.py PROTOCOL LISTEN MEMBERS

Prints one JSON line {"name", "segment", "pid"}, then serves until stdin
closes or says "quit".
"""

import json
import os
import sys

import kvfabric


def main() -> None:
    protocol, listen, members = sys.argv[1], sys.argv[2], sys.argv[3]
    with kvfabric.Engine(protocol=protocol, settings={"KVF_LOG_LEVEL": "error"}) as engine:
        store = kvfabric.Store(engine, pool_bytes=32 << 20, members=members, listen=listen,
                               settings={"KVF_STORE_DEADLINE_MS": 2000, "KVF_STORE_DOWN_RETRY_MS": 300})
        print(json.dumps({"name": store.name, "segment": engine.name, "pid": os.getpid()}), flush=True)
        for line in sys.stdin:
            if line.strip() == "quit":
                break
        store.close()


if __name__ == "__main__":
    main()
