"""Byte counts: as people write them ("4gb", "512 MiB"), and packed into a
buffer; and latency histogram bounds as people read them ("<=50 us")."""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

__all__ = ["parse_bytes", "runs_within", "latency_bound"]

# The suffixes KVF_* byte settings take too (src/common/settings.cc, ParseBytes): powers of 1024, any case.
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", 1):
    _UNITS.update({_p: 1 << (10 * _i), _p + "b": 1 << (10 * _i), _p + "i": 1 << (10 * _i), _p + "ib": 1 << (10 * _i)})


def parse_bytes(value: Any, what: str) -> int:
    """A byte count from an int or a string such as "4gb", "512 MiB", "1048576"
    (binary units); raises ValueError naming ``what`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} is not a byte count")
    if isinstance(value, int):
        n = value
    else:
        text = str(value).strip().lower().replace(" ", "")
        digits = len(text) - len(text.lstrip("0123456789."))
        number, unit = text[:digits], text[digits:]
        if not number or unit not in _UNITS:
            raise ValueError(f"{what}: {value!r} is not a byte count (an integer, or a number with kb, mb, gb or tb)")
        n = int(float(number) * _UNITS[unit])
    if n < 0:
        raise ValueError(f"{what}: {value!r} is negative")
    return n


def runs_within(sizes: Sequence[int], capacity: int, too_large: str) -> Iterator[list[int]]:
    """Consecutive runs of indices of ``sizes`` whose sizes fit ``capacity``
    together, in order, each as long as it can be; raises ValueError with
    ``too_large`` (formatted with ``size`` and ``capacity``) for a size larger
    than ``capacity`` alone, before yielding a run that follows it."""
    run: list[int] = []
    used = 0
    for i, n in enumerate(sizes):
        if n > capacity:
            raise ValueError(too_large.format(size=n, capacity=capacity))
        if used + n > capacity:
            yield run
            run, used = [], 0
        run.append(i)
        used += n
    if run:
        yield run


def latency_bound(seconds: Optional[float], symbols: bool = False) -> str:
    """A latency histogram bucket's upper bound (in seconds; None: no data,
    inf: the overflow bucket, past 10 s) for people: "<=50 us", "<=2 ms",
    "<=1.5 s", ">10 s", "-"; with ``symbols``, "≤" and "µs" (the terminal
    UI) instead of the log's ASCII."""
    if seconds is None:
        return "-"
    if seconds == float("inf"):
        return ">10 s"
    le, us = ("≤", "µs") if symbols else ("<=", "us")
    if seconds < 1e-3:
        return "%s%g %s" % (le, seconds * 1e6, us)
    return "%s%g ms" % (le, seconds * 1e3) if seconds < 1 else "%s%g s" % (le, seconds)
