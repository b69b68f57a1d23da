"""A process that joins a store as SGLang's and vLLM's workers do through
``mooncake.store``: ``MooncakeDistributedStore.setup`` giving memory, with the
members from the metadata backend.

    python mooncake_store_node.py PROTOCOL METADATA_URI

Prints one JSON line {"setup": rc, "hostname": ...}, then serves until stdin
closes or says "quit".
"""

import sys

from kvfabric.compat.mooncake_store import MooncakeDistributedStore
from store_node import serve


def main() -> None:
    protocol, metadata = sys.argv[1], sys.argv[2]
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", metadata, 32 << 20, 1 << 20, protocol, "", "")
    serve({"setup": rc, "hostname": store.get_hostname()}, store.close)


if __name__ == "__main__":
    main()
