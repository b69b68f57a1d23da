"""Status codes, task states and op codes: Python against the one declaration
(include/kvfabric/codes.h), read here from the header itself."""

import enum
import os
import re

import pytest

import kvfabric
from kvfabric import _core, errors
from kvfabric.errors import ERROR_CLASSES, KvfabricError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def declared(list_name: str) -> list[tuple[int, str, str, str]]:
    """(number, Name, C_NAME, meaning) rows of one list macro of codes.h."""
    with open(os.path.join(ROOT, "include", "kvfabric", "codes.h")) as f:
        text = f.read()
    body = re.search(rf"#define {list_name}\(X\)(.*?)(?:\n\n|\n#)", text, re.S).group(1)
    rows = re.findall(r'X\((\d+), (\w+), (\w+), "([^"]*)"\)', body)
    assert rows, list_name
    return [(int(n), name, c_name, meaning) for n, name, c_name, meaning in rows]


def test_core_exports_the_declaration():
    assert [(code, name, c_name, meaning) for name, code, c_name, meaning in _core.status_codes()] == [
        (n, name, f"KVF_{c}", meaning) for n, name, c, meaning in declared("KVF_STATUS_CODES")
    ]


def test_every_code_has_its_exception_class():
    rows = declared("KVF_STATUS_CODES")
    assert sorted(ERROR_CLASSES) == sorted(n for n, *_ in rows)
    for number, name, _, _ in rows:
        cls = ERROR_CLASSES[number]
        assert cls.code == number and issubclass(cls, KvfabricError)
        assert cls.__name__ == (name if name.endswith("Error") else f"{name}Error") or (name, cls.__name__) == (
            "Timeout",
            "TransferTimeoutError",
        )
        assert getattr(kvfabric, cls.__name__) is cls  # exported by the package
        e = errors.error_for(number, "detail")
        assert type(e) is cls and e.code == number and str(e) == "detail"
    assert KvfabricError.code == ERROR_CLASSES[[n for n, name, *_ in rows if name == "Internal"][0]].code
    assert type(errors.error_for(999, "x")) is KvfabricError and errors.error_for(999, "x").code == 999


def test_released_names_bases_and_numbers():
    # What users catch: every name of the released package, its built-in base
    # and its number (ABI, with the C API's negated codes) stay.
    released = {
        "InvalidArgumentError": (1, ValueError),
        "NotFoundError": (2, LookupError),
        "OutOfRangeError": (3, ValueError),
        "BusyError": (4, None),
        "TransferTimeoutError": (5, TimeoutError),
        "FabricError": (6, None),
        "NetworkError": (7, ConnectionError),
        "ProtocolError": (8, None),
        "UnavailableError": (9, None),
        "InternalError": (10, None),
        "PermissionDeniedError": (11, PermissionError),
        "ClosedError": (12, None),
    }
    for name, (code, base) in released.items():
        cls = getattr(kvfabric, name)
        assert cls.code == code and issubclass(cls, KvfabricError) and cls.__doc__, name
        if base is not None:
            assert issubclass(cls, base), name
    assert issubclass(KvfabricError, RuntimeError)


def test_a_difference_fails_the_import():
    rows = list(_core.status_codes())
    errors.check_codes(rows)  # what engine.py runs on import
    with pytest.raises(ImportError, match=r"code 13 \(Overloaded, KVF_EOVERLOAD\) has no class: add OverloadedError"):
        errors.check_codes(rows + [("Overloaded", 13, "KVF_EOVERLOAD", "too much")])
    with pytest.raises(ImportError, match=r"ClosedError.code = 12 is no code of the engine"):
        errors.check_codes(rows[:-1])
    swapped = [(("Busy" if r[0] == "Timeout" else "Timeout" if r[0] == "Busy" else r[0]),) + tuple(r[1:]) for r in rows]
    with pytest.raises(ImportError, match=r"code 4 is Timeout \(KVF_EBUSY\) in the engine, but BusyError here"):
        errors.check_codes(swapped)


def test_engine_errors_carry_their_class_and_code():
    with kvfabric.Engine(protocol="tcp") as e:
        with pytest.raises(kvfabric.NotFoundError) as info:
            e.unregister(0x1000)
        assert info.value.code == kvfabric.NotFoundError.code
        # The class names the code; the text says what happened, without repeating it.
        assert str(info.value).startswith("buffer ") and "is not registered" in str(info.value), str(info.value)


@pytest.mark.parametrize("enum_name, list_name", [("TaskState", "KVF_TASK_STATES"), ("OpCode", "KVF_OP_CODES")])
def test_task_states_and_op_codes_are_enums_of_the_declaration(enum_name, list_name):
    cls = getattr(kvfabric, enum_name)
    assert issubclass(cls, enum.IntEnum)
    rows = declared(list_name)
    assert [(m.name, m.value, m.__doc__) for m in cls] == [(c, n, meaning) for n, _, c, meaning in rows]
    for number, _, c_name, _ in rows:
        assert cls[c_name] == number and cls(number) is cls[c_name]
    assert kvfabric.State is kvfabric.TaskState and kvfabric.Op is kvfabric.OpCode


def test_released_state_and_op_numbers():
    S, Op = kvfabric.TaskState, kvfabric.OpCode
    assert (S.PENDING, S.COMPLETED, S.FAILED, S.TIMEOUT) == (0, 1, 2, 3)
    assert (Op.READ, Op.WRITE) == (0, 1)


def test_transfers_report_the_enum():
    with kvfabric.Engine(protocol="tcp") as e:
        buf = bytearray(8192)
        addr = e.register(buf)
        t = e.submit([kvfabric.Request(kvfabric.OpCode.WRITE, addr, addr + 4096, 16)], e.name)
        assert t.wait(30) == 16
        for st in (t.status(), t.task_status(0)):
            assert st.state is kvfabric.TaskState.COMPLETED and st.state == 1


def errors_table() -> str:
    lines = [
        "| `.code` | exception | also a | C (`-code`) | C++ `Status::Code` | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, code, c_name, meaning in _core.status_codes():
        cls = ERROR_CLASSES[code]
        also = ", ".join(f"`{b.__name__}`" for b in cls.__bases__ if b is not KvfabricError)
        lines.append(f"| {code} | `{cls.__name__}` | {also} | `{c_name}` | `k{name}` | {meaning} |")
    return "\n".join(lines) + "\n"


def enum_table(cls, c_prefix: str = "KVF_") -> str:
    lines = [f"| `{cls.__name__}` | value | C | meaning |", "|---|---|---|---|"]
    lines += [f"| `{m.name}` | {m.value} | `{c_prefix}{m.name}` | {m.__doc__} |" for m in cls]
    return "\n".join(lines) + "\n"


def test_docs_list_the_declaration():
    with open(os.path.join(ROOT, "docs", "python.md")) as f:
        doc = f.read()
    for table in (errors_table(), enum_table(kvfabric.TaskState), enum_table(kvfabric.OpCode)):
        assert table in doc, f"docs/python.md is stale: it should contain\n{table}"
