"""A target process for the Python tests: a real kvfabric engine in its own
process, driven through stdin.

    python peer.py PROTOCOL SIZE [API [METADATA]]   API: engine (default) or mooncake

It registers SIZE bytes filled with pattern seed 1, prints one JSON line
{"name", "addr", "size", "pid"}, then answers one line per command:
    check OFF LEN SEED  -> number of bytes matching the pattern
    fill OFF LEN SEED   -> "ok"
    notifies            -> JSON list of [name, msg] received (mooncake API), or
                           of the messages received in hex (engine API)
    send NAME HEX...    -> "ok" once it sent each message (hex; "-" is empty) to
                           NAME with Engine.notify, else the error (engine API)
    mwrite NAME ADDR LEN HEXNAME HEXMSG
                        -> the return code of transfer_sync(WRITE) of LEN bytes
                           of its buffer to ADDR at NAME with a TransferNotify
                           of those bytes (mooncake API)
    quit
"""

import json
import sys

import numpy as np

from patterns import pattern


def main() -> None:
    protocol, size = sys.argv[1], int(sys.argv[2])
    api = sys.argv[3] if len(sys.argv) > 3 else "engine"
    metadata = sys.argv[4] if len(sys.argv) > 4 else "P2PHANDSHAKE"
    buf = np.empty(size, dtype=np.uint8)
    buf[:] = pattern(0, size, 1)
    if api == "mooncake":
        from kvfabric.compat.mooncake import TransferEngine

        te = TransferEngine()
        assert te.initialize("127.0.0.1", metadata, protocol, "") == 0
        assert te.register_memory(buf.ctypes.data, size) == 0
        name = f"127.0.0.1:{te.get_rpc_port()}"
    else:
        import kvfabric

        e = kvfabric.Engine(protocol=protocol, metadata="p2p" if metadata == "P2PHANDSHAKE" else metadata)
        e.register(buf)
        name = e.name
    import os

    print(json.dumps({"name": name, "addr": int(buf.ctypes.data), "size": size, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        if parts[0] == "check":
            off, n, seed = map(int, parts[1:])
            print(int(np.count_nonzero(buf[off : off + n] == pattern(off, n, seed))), flush=True)
        elif parts[0] == "fill":
            off, n, seed = map(int, parts[1:])
            buf[off : off + n] = pattern(off, n, seed)
            print("ok", flush=True)
        elif parts[0] == "notifies" and api == "mooncake":
            print(json.dumps([[x.name, x.msg] for x in te.get_notifies()]), flush=True)
        elif parts[0] == "notifies":
            print(json.dumps([m.hex() for m in e.notifies()]), flush=True)
        elif parts[0] == "send":
            try:
                for h in parts[2:]:
                    e.notify(parts[1], b"" if h == "-" else bytes.fromhex(h))
                print("ok", flush=True)
            except Exception as err:  # the test shows what failed
                print(f"{type(err).__name__}: {err}".replace("\n", " "), flush=True)
        elif parts[0] == "mwrite":
            from kvfabric.compat.mooncake import TransferNotify, TransferOpcode

            name, addr, n = parts[1], int(parts[2]), int(parts[3])
            notify = TransferNotify(*(b"" if h == "-" else bytes.fromhex(h) for h in parts[4:6]))
            print(te.transfer_sync(name, buf.ctypes.data, addr, n, TransferOpcode.WRITE, notify), flush=True)


if __name__ == "__main__":
    main()
