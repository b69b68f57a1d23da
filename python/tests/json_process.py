"""A test's helper process that speaks JSON lines: it prints one object with
"ready" once started, then answers each command line with one object; the
line "quit" ends it (exit status 0). JsonProcess is the test's side, serve()
the helper's."""

import json
import os
import subprocess
import sys
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


class JsonProcess:
    def __init__(self, script: str, spec: dict, env: dict | None = None, what: str = "process"):
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, script), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
            env=env,
        )
        line = self.p.stdout.readline()
        assert line and json.loads(line)["ready"], f"{what} did not start (exit {self.p.poll()})"
        self.info = json.loads(line)

    def __call__(self, **cmd) -> dict:
        self.ask(**cmd)
        return self.answer()

    def ask(self, **cmd) -> None:
        """Sends a command without waiting: several helpers can work at once."""
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def answer(self) -> dict:
        """The answer to the command sent last."""
        return json.loads(self.p.stdout.readline())

    def close(self) -> None:
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        assert self.p.wait(timeout=20) == 0


def qualified_name(obj) -> str:
    """ "module.Class" of `obj`'s class, as helpers report what they made."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def serve(ready: dict, handle: Callable[[dict], dict]) -> None:
    """The helper's side: prints `ready` (with "ready": true), then answers
    each command line with handle(command) until "quit" or the end of input."""
    print(json.dumps({"ready": True, **ready}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        print(json.dumps(handle(json.loads(line))), flush=True)
