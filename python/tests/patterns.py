"""The byte pattern both sides of a test agree on (position- and seed-dependent)."""

import numpy as np


def pattern(offset: int, length: int, seed: int) -> np.ndarray:
    i = np.arange(offset, offset + length, dtype=np.uint64)
    return ((i * 131 + seed * 7 + (i >> 12)) & 0xFF).astype(np.uint8)
