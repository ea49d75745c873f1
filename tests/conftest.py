import zlib

import numpy as np
import pytest

from fwht_gpu import dtypes as _dt

DTYPES = list(_dt.SUPPORTED)
DTYPE_IDS = [_dt.short_name(d) for d in DTYPES]
VARIANTS = [("folklore", None), ("folklore", "kahan"), ("folklore", "neumaier"), ("alman", None)]
VARIANT_IDS = ["folklore", "kahan", "neumaier", "alman"]


@pytest.fixture
def rng(request):
    # a fresh, reproducible stream per test (crc32: str hash() is randomized per process)
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
