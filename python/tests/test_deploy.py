"""docs/deploy.md followed word for word on the lab's two hosts (tests/lab/lab.sh: network namespaces A at
10.77.0.1 and B at 10.77.0.2, one shared filesystem): the wheel installed as section 1 says, the token of section 3,
etcd or kvfabric's metadata server in host A, a store node on each host, the page client and the README's target
and initiator between the hosts, and the log lines of section 8. Each block runs as printed with its capitals
filled in (and a 64 MiB pool instead of 8 GiB); a block the tests cannot run is named below with the reason, and a
new block must be one or the other. The errors a user meets along the way (no token, a port in use) are provoked
and must name their cause.

Needs root and network namespaces (skipped with the lab's reason otherwise) and the wheel (KVF_WHEEL_DIR, as for
test_wheel.py).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from conftest import LAB_ENV, LAB_HOSTS, in_host
from test_readme import examples as readme_examples

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
A, B = LAB_HOSTS["A"], LAB_HOSTS["B"]
# The blocks that need what this machine lacks, by a command they hold.
NOT_RUN = {
    "fi_info -p efa": "EFA devices",
    "pip install -v .": "a build from source (make python builds the same tree)",
    "docker run": "a container engine and EFA devices",
}
SERVERS = ("etcd ", "kvfabric metadata-server", "kvfabric store-node", "python target.py")


def blocks() -> list:
    """deploy.md's code blocks in order: (language, text)."""
    with open(os.path.join(ROOT, "docs", "deploy.md")) as f:
        return re.findall(r"```(sh|python)\n(.*?)```", f.read(), re.S)


def where(text: str) -> str:
    """Where a shell block runs, from its first line: `# on PLACE` gives PLACE, `# once` "once"; "" otherwise."""
    first = text.splitlines()[0]
    return first[5:] if first.startswith("# on ") else "once" if first == "# once" else ""


def test_every_block_is_run_or_says_why_not():
    for lang, text in blocks():
        if lang == "python":
            assert re.match(r"# \w+\.py ", text), f"a Python block without its file name:\n{text}"
            continue
        skipped = [k for k in NOT_RUN if k in text]
        assert bool(where(text)) != bool(skipped), f"run it (# on HOST) or name what it needs in NOT_RUN:\n{text}"


def fill(text: str, host: str, metadata: str) -> str:
    """The block with this deployment's values: each capital, the metadata store chosen, a small pool."""
    if metadata == "http":
        text = text.replace("etcd://ETCD_HOST:2379", "http://META_HOST:8080/metadata")
    for name, value in (("HOST_A", A), ("HOST_B", B), ("ETCD_HOST", A), ("META_HOST", A), ("HOST", host)):
        text = re.sub(rf"\b{name}\b", value, text)
    return text.replace("--pool 8gb", "--pool 64mb")


def shell(text: str) -> list:
    """The commands of a block, comments and blank lines left out."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


class Deployment:
    """The processes started from the page's blocks, in a working folder shared by both hosts."""

    def __init__(self, cwd, env):
        self.cwd, self.env, self.servers = cwd, env, []

    def run(self, host: str, command: str, **kw) -> subprocess.CompletedProcess:
        cmd = ["bash", "-c", command] if host == "machine" else in_host(host, "bash", "-c", command)
        return subprocess.run(cmd, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120, **kw)

    def start(self, host: str, command: str) -> subprocess.Popen:
        p = subprocess.Popen(
            in_host(host, "bash", "-c", f"exec {command}"),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.servers.append(p)
        return p

    def wait_for(self, host: str, probe: str, proc: subprocess.Popen, what: str):
        deadline = time.monotonic() + 20
        while self.run(host, probe).returncode != 0:
            assert proc.poll() is None, f"{what} ended: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.1)

    def stop(self):
        for p in reversed(self.servers):
            if p.returncode is None:
                p.stdin.close()
                p.terminate()
                p.wait(timeout=20)


@pytest.fixture(scope="module")
def wheel_dir():
    where_ = os.environ.get("KVF_WHEEL_DIR")
    if not where_:
        pytest.skip("no wheel to install: make wheel builds one into dist/, and make test passes KVF_WHEEL_DIR")
    return where_


@pytest.mark.parametrize("metadata", ["etcd", "http"])
def test_deploy_md_word_for_word_on_two_hosts(lab, wheel_dir, metadata, tmp_path):
    if metadata == "etcd" and shutil.which("etcd") is None:
        pytest.skip("no etcd binary (Debian: apt install etcd-server; make deps installs it)")
    cwd = tmp_path / "work"
    cwd.mkdir()
    shutil.copytree(wheel_dir, cwd / "dist")
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    env = {k: v for k, v in LAB_ENV.items() if k not in ("PYTHONPATH", "KVF_LOG_LEVEL")}
    env.update(PATH=f"{tmp_path / 'venv' / 'bin'}:{env['PATH']}", VIRTUAL_ENV=str(tmp_path / "venv"))
    for name, code in readme_examples().items():
        (cwd / name).write_text(code)
    d = Deployment(cwd, env)
    out = {}
    try:
        for lang, text in blocks():
            if lang == "python":
                (cwd / text.split()[1]).write_text(fill(text, B, metadata))
                continue
            place = where(text)
            if not place or place == {"etcd": "META_HOST", "http": "ETCD_HOST"}[metadata]:
                continue  # hardware-only, or the metadata store this run did not choose
            hosts = {
                "each host": ["machine"],
                "once": ["machine"],
                "each storage host": ["A", "B"],
                "host A": ["A"],
                "host B": ["B"],
                "ETCD_HOST": ["A"],
                "META_HOST": ["A"],
            }[place]
            for host in hosts:
                addr = LAB_HOSTS.get(host, A)
                for command in shell(fill(text, addr, metadata)):
                    if command.startswith("export "):
                        r = d.run(host, f"{command}\necho ${command.split()[1].split('=')[0]}")
                        assert r.returncode == 0, r.stderr
                        d.env[command.split()[1].split("=")[0]] = r.stdout.strip()
                    elif command.startswith(SERVERS):
                        out[(command.split()[0 if command.startswith("etcd") else 1], host)] = d.start(host, command)
                        served(d, command, host, out)
                    else:
                        r = d.run(host, command)
                        assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-3000:])
                        out[(command.split()[0 if command.startswith("pip") else 1], host)] = r
        provoke_errors(d, metadata)
        check(d, out, metadata)
    finally:
        d.stop()


def served(d: Deployment, command: str, host: str, out: dict):
    """Waits until the server `command` started serves."""
    proc = d.servers[-1]
    if command.startswith("etcd"):
        d.wait_for(host, f"curl -sf -X POST -d '{{}}' http://{A}:2379/v3/maintenance/status", proc, "etcd")
    elif "metadata-server" in command:
        d.wait_for(host, f"curl -s -o /dev/null http://{A}:8080/metadata?key=probe", proc, "the metadata server")
    else:  # a store node or the target print one line once they serve
        line = proc.stdout.readline()
        assert line, f"{command} on host {host} did not start: {proc.stderr.read()[-3000:]}"
        out[("printed", host, command.split()[1])] = line


def check(d: Deployment, out: dict, metadata: str):
    version = out[("--version", "machine")].stdout
    assert re.fullmatch(r"kvfabric [\d.]+ \(libfabric [\d.]+ loaded, built against [\d.]+\)\n", version), version
    assert "locked-memory limit" in out[("doctor", "machine")].stdout
    node = {h: json.loads(out[("printed", h, "store-node")]) for h in "AB"}
    for h in "AB":
        assert node[h]["name"] == f"{LAB_HOSTS[h]}:7400" and node[h]["segment"].startswith(LAB_HOSTS[h] + ":"), node
    pages = out[("store_pages.py", "B")].stdout.splitlines()
    assert pages[0] == f"members: {A}:7400 {B}:7400", pages
    m = re.fullmatch(r"read back 64 of 64 pages; held by (\{.*\})", pages[1])
    assert m, pages
    held = eval(m.group(1), {})  # a dict of segment name -> pages, as printed
    assert set(held) == {node["A"]["segment"], node["B"]["segment"]} and sum(held.values()) == 64, held
    assert out[("printed", "A", "target.py")].strip() == f"{A}:15000"
    assert out[("initiator.py", "B")].stdout.strip() == "read back 32768 bytes of 7"
    # Section 8: what a node logs at info when it works.
    logs = {}
    for h in "AB":
        p = out[("store-node", h)]
        p.terminate()
        logs[h] = p.communicate(timeout=20)[1]
        assert p.returncode == 0, logs[h][-3000:]
    uri = f"etcd://{A}:2379" if metadata == "etcd" else f"http://{A}:8080/metadata"
    for h in "AB":
        name, seg = f"{LAB_HOSTS[h]}:7400", node[h]["segment"]
        assert re.search(rf"engine {re.escape(seg)} ready: .*segment published in {re.escape(uri)}", logs[h]), logs[h]
        assert f"store node {name} serving a pool of 64 MiB (segment {seg})" in logs[h], logs[h]
        other = "B" if h == "A" else "A"
        assert (
            f"store member {LAB_HOSTS[other]}:7400 joined placement (segment {node[other]['segment']}, pool 64 MiB)"
        ) in logs[h], logs[h]


def provoke_errors(d: Deployment, metadata: str):
    """The errors a user meets on the way name their cause and what to do (docs/troubleshooting.md)."""
    uri = f"etcd://{A}:2379" if metadata == "etcd" else f"http://{A}:8080/metadata"
    # The same store node twice on one host: the port is taken.
    again = d.run("A", f"kvfabric store-node --pool 64mb --listen {A}:7400 --metadata {uri}")
    assert again.returncode == 1 and "Address already in use" in again.stderr, again.stderr[-2000:]
    # A client without the deployment's token.
    token = d.env.pop("KVF_AUTH_TOKEN")
    try:
        r = d.run("B", f"python store_pages.py {B} {uri}")
    finally:
        d.env["KVF_AUTH_TOKEN"] = token
    assert r.returncode != 0 and "KVF_AUTH_TOKEN" in r.stderr, (r.stdout, r.stderr[-6000:])
