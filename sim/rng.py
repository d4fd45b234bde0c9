"""Named random streams derived from one seed.

Every source of randomness (arrivals, prompt lengths, output lengths, the random router, ...)
draws from its own ``numpy.random.Generator``, keyed by a stable name. Adding a new stream or
drawing more numbers from one never shifts the numbers another stream produces, and the same
seed always gives the same streams, in any process.
"""

import zlib

import numpy as np


def stream(seed: int, name: str) -> np.random.Generator:
    """The generator for stream ``name`` under ``seed`` (same inputs, same numbers)."""
    # crc32 is stable across processes, unlike hash() which is salted per interpreter.
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])
