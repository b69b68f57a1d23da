"""vLLM's, SGLang's and checkpoint-engine's call sequences on ``mooncake.engine``
(framework_calls.py), each in its own process against a target process,
over tcp and shm, with host memory and with GPU pointers from the fake CUDA
driver; plus the start-up paths the frameworks take (protocol "rdma", bare
host names, MC_* variables)."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.environ.get("KVF_FAKE_CUDA_LIBRARY", os.path.join(HERE, "..", "..", "build", "tests", "libfake_cuda.so"))
SCENARIOS = [
    "sglang_pd",
    "vllm_connector",
    "vllm_ec_connector",
    "checkpoint_engine",
    "sglang_remote_weights",
    "sglang_elastic_ep",
    "miles_weight_update",
]


def run_python(code_or_args, env=None, timeout=120):
    args = code_or_args if isinstance(code_or_args, list) else ["-c", code_or_args]
    full = dict(os.environ, KVF_LOG_LEVEL="info", **(env or {}))
    return subprocess.run([sys.executable, *args], env=full, capture_output=True, text=True, timeout=timeout, cwd=HERE)


def run_scenario(name, protocol, peer, gpu=False, env=None):
    extra = dict(env or {})
    if gpu:
        extra["KVF_CUDA_LIBRARY"] = os.path.abspath(FAKE)
    args = [os.path.join(HERE, "framework_calls.py"), name, protocol, peer.name, str(peer.addr), str(peer.size)]
    r = run_python(args + (["gpu"] if gpu else []), env=extra)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), f"{name}:\n{r.stdout}\n{r.stderr[-4000:]}"
    return r


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_framework_calls_with_host_memory(scenario, protocol, peer_factory):
    run_scenario(scenario, protocol, peer_factory(protocol, api="mooncake"))


needs_fake_cuda = pytest.mark.skipif(not os.path.exists(FAKE), reason=f"no fake CUDA driver at {FAKE} (make build)")


@needs_fake_cuda
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_framework_calls_with_gpu_pointers(scenario, protocol, peer_factory):
    """Raw CUDA pointers, registered without a location, become cuda:N and
    move through staging to and from the peer's host memory, byte-exact."""
    r = run_scenario(scenario, protocol, peer_factory(protocol, api="mooncake"), gpu=True)
    assert "CUDA driver loaded" in r.stderr


@needs_fake_cuda
def test_a_peers_gpu_memory_fails_with_the_reason_where_the_fabric_cannot_reach_it():
    """The decode side's GPU KV cache as a WRITE target needs FI_HMEM
    (GPUDirect); over tcp the write fails with Mooncake's -1 and a log
    line that says why, instead of hanging or writing elsewhere."""
    code = """
import ctypes, os
from kvfabric.compat.mooncake import TransferEngine
lib = ctypes.CDLL(os.environ["KVF_CUDA_LIBRARY"])
lib.fake_cuda_alloc.restype = ctypes.c_void_p
lib.fake_cuda_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int]
decode, prefill = TransferEngine(), TransferEngine()
assert decode.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
assert prefill.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
kv = lib.fake_cuda_alloc(1 << 20, 0)
assert decode.batch_register_memory([kv], [1 << 20]) == 0
src = (ctypes.c_uint8 * (1 << 20))()
assert prefill.register_memory(ctypes.addressof(src), 1 << 20) == 0
peer = f"127.0.0.1:{decode.get_rpc_port()}"
assert prefill.batch_transfer_sync_write(peer, [ctypes.addressof(src)], [kv], [1 << 20]) == -1
bid = prefill.transfer_submit_write(peer, ctypes.addressof(src), kv, 1 << 20)
while bid != 0 and (rc := prefill.transfer_check_status(bid)) == 0:
    pass
assert bid == 0 or rc == -1
print("ok")
"""
    r = run_python(code, env={"KVF_CUDA_LIBRARY": os.path.abspath(FAKE)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    assert "GPU memory" in r.stderr and "FI_HMEM" in r.stderr, r.stderr


def test_rdma_means_the_hosts_rdma_fabric_and_mc_force_tcp_overrides_it(peer_factory):
    """The frameworks' default protocol is "rdma". On a host without an RDMA
    NIC it fails at initialize with a line that says what to do; with
    MC_FORCE_TCP=1 (SGLang's mooncake_tcp backend sets it) it runs on tcp."""
    code = """
from kvfabric.compat.mooncake import TransferEngine
te = TransferEngine()
print("rc", te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", ""))
if te.get_engine() is not None:
    print("rails", [r["provider"] for r in te.get_engine().rails()])
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    from kvfabric import _core

    if _core.fabric_domains("efa") or _core.fabric_domains("verbs"):
        assert "rc 0" in r.stdout and "protocol rdma: using" in r.stderr, r.stdout + r.stderr
    else:
        assert "rc -1" in r.stdout and "MC_FORCE_TCP=1" in r.stderr, r.stdout + r.stderr
    r = run_python(code, env={"MC_FORCE_TCP": "1", "MC_SLICE_SIZE": "65536", "MC_TRANSFER_TIMEOUT": "7"})
    assert "rc 0" in r.stdout and "tcp;ofi_rxm" in r.stdout, r.stdout + r.stderr
    assert "MC_FORCE_TCP -> protocol tcp" in r.stderr
    assert "KVF_TRANSFER_TIMEOUT_MS=7000" in r.stderr
    assert "ignored: MC_SLICE_SIZE" in r.stderr


def test_bare_host_names_pick_a_port_of_mooncakes_range_and_ipv6_names_work(peer_factory):
    code = """
import os, socket
from kvfabric.compat.mooncake import TransferEngine
a = TransferEngine()
assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
print("port", a.get_rpc_port())
try:
    socket.socket(socket.AF_INET6).bind(("::1", 0))
except OSError:
    print("no ipv6")
    raise SystemExit(0)
b = TransferEngine()
assert b.initialize("::1", "P2PHANDSHAKE", "tcp", "") == 0
buf = bytearray(4096)
import ctypes
addr = ctypes.addressof((ctypes.c_char * 4096).from_buffer(buf))
assert b.register_memory(addr, 4096) == 0
# vLLM builds f"{get_ip()}:{port}": an IPv6 host without brackets.
assert a.send_probe(f"::1:{b.get_rpc_port()}") == 0
assert a.get_first_buffer_address(f"[::1]:{b.get_rpc_port()}") == addr
print("ipv6 ok", b.get_engine().name)
"""
    r = run_python(code, env={"MC_MIN_RPC_PORT": "16100", "MC_MAX_RPC_PORT": "16199"})
    assert r.returncode == 0, r.stdout + r.stderr
    port = int(r.stdout.split("port ", 1)[1].split()[0])
    assert 16100 <= port <= 16199
    assert "no ipv6" in r.stdout or "ipv6 ok [::1]:" in r.stdout, r.stdout + r.stderr


def test_device_names_as_users_pass_them():
    """Comma lists map to the provider's domains; on tcp, as in Mooncake, names the provider does not have are
    ignored with one info line (an RDMA device list passed everywhere still starts), while the names it has
    still choose the NICs; on a provider that has devices, a name it lacks fails initialize and the log lists
    what exists."""
    code = """
from kvfabric.compat.mooncake import TransferEngine
ok = TransferEngine()
print("list", ok.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", " lo, lo "))
print("rails", [r["domain"] for r in ok.get_engine().rails() if r["provider"].startswith("tcp")])
rdma = TransferEngine()
print("rdma names", rdma.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "mlx5_7,mlx5_8"))
mixed = TransferEngine()
print("mixed", mixed.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "ibp6s0,lo"))
print("mixed rails", [r["domain"] for r in mixed.get_engine().rails() if r["provider"].startswith("tcp")])
bad = TransferEngine()
print("bad", bad.initialize("127.0.0.1", "P2PHANDSHAKE", "shm", "mlx5_7"))
print("vendor", TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "nvlink", ""))
"""
    r = run_python(code)
    out = r.stdout
    assert "list 0" in out and "rails ['lo']" in out, out + r.stderr
    assert "rdma names 0" in out and "mixed 0" in out and "mixed rails ['lo']" in out, out + r.stderr
    assert "device name(s) mlx5_7, mlx5_8 ignored on tcp" in r.stderr and "using every NIC" in r.stderr, r.stderr
    assert "device name(s) ibp6s0 ignored on tcp" in r.stderr and "using lo" in r.stderr, r.stderr
    assert "bad -1" in out and "vendor -1" in out, out + r.stderr
    assert "device 'mlx5_7' is not a NIC of provider shm (it has: " in r.stderr, r.stderr
    assert "vendor transport" in r.stderr


def test_module_names_keywords_and_topology():
    from kvfabric.compat import mooncake as mc

    assert mc.TransferOpcode.Read == 0 and mc.TransferOpcode.Write == 1
    assert mc.Read is mc.TransferOpcode.Read and mc.TransferEngine.TransferOpcode is mc.TransferOpcode
    assert mc.SUPPORT_EFA in (True, False) and mc.SUPPORT_CUDA is True
    te = mc.TransferEngine()
    assert te.get_engine_ptr() == 0
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        assert te.get_engine_ptr() != 0
        import ctypes
        import json

        buf = (ctypes.c_uint8 * 8192)()
        a = ctypes.addressof(buf)
        assert te.register_memory(a, 4096, location="*") == 0
        assert te.batch_register_memory([a + 4096], [4096], location="cpu:0") == 0
        assert te.register_memory(a + 8192 - 1, 1, "gpu:0") < 0  # a location kvfabric does not know
        me = te.get_local_hostname()
        assert te.transfer_sync_write(me, a, a + 4096, 16, transport_hint="rdma") == 0
        assert te.batch_transfer_sync_read(me, [a], [a + 4096], [16], transport_hint="") == 0
        assert te.transfer_sync(me, a, a + 4096, 16, mc.TransferOpcode.Write, None, transport_hint="") == 0
        topo = json.loads(te.get_local_topology())
        assert "cpu:0" in topo and len(topo["cpu:0"]) == 2
        assert json.loads(te.get_local_topology(device_name="lo"))["cpu:0"][0] == ["lo"]
        # Mooncake's signature of write_bytes_to_buffer: a length of -1 is an error, not a crash.
        assert te.write_bytes_to_buffer(a, b"x" * 16, -1) < 0
        assert te.read_bytes_from_buffer(a, -1) == b""
    finally:
        te.close()


def test_mc_te_metric_logs_throughput_every_interval():
    code = """
import ctypes, time
from kvfabric.compat.mooncake import TransferEngine
a, b = TransferEngine(), TransferEngine()
assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
src, dst = (ctypes.c_uint8 * (1 << 20))(), (ctypes.c_uint8 * (1 << 20))()
assert a.register_memory(ctypes.addressof(src), 1 << 20) == 0
assert b.register_memory(ctypes.addressof(dst), 1 << 20) == 0
peer = f"127.0.0.1:{b.get_rpc_port()}"
until = time.monotonic() + 2.5
while time.monotonic() < until:
    assert a.transfer_sync_write(peer, ctypes.addressof(src), ctypes.addressof(dst), 1 << 20) == 0
a.close(); b.close()
print("ok")
"""
    r = run_python(code, env={"MC_TE_METRIC": "1", "MC_TE_METRIC_INTERVAL_SECONDS": "1"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    assert "MC_TE_METRIC: a throughput line every 1 s" in r.stderr
    lines = [x for x in r.stderr.splitlines() if "mooncake compat: throughput" in x and "MB/s" in x]
    assert len(lines) >= 2, r.stderr  # the writer logs at 1 s and at 2 s (a target completes no operations)
    assert all("write latency p50 <=" in x and "requests/s" in x for x in lines), lines


def test_libfabric_queried_before_the_first_engine_still_reaches_peers(peer_factory):
    """get_local_topology() before initialize(), or kvfabric doctor's domain
    list, starts libfabric; it must start with what an engine sets first (the
    rxm buffer size peers must agree on), or every tcp transfer to another
    process hangs until its deadline."""
    peer = peer_factory("tcp", api="mooncake")
    code = f"""
import ctypes
from kvfabric import _core
from kvfabric.compat.mooncake import TransferEngine
_core.fabric_domains("verbs")
te = TransferEngine()
print(len(te.get_local_topology()) > 2)
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
buf = (ctypes.c_uint8 * (1 << 20))()
assert te.register_memory(ctypes.addressof(buf), 1 << 20) == 0
print("rc", te.transfer_sync_read("{peer.name}", ctypes.addressof(buf), {peer.addr}, 1 << 20))
"""
    r = run_python(code, env={"KVF_TRANSFER_TIMEOUT_MS": "5000"})
    assert "rc 0" in r.stdout, r.stdout + r.stderr
