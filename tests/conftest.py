import numpy as np
import pytest

from fwht_gpu import dtypes as _dt

DTYPES = list(_dt.SUPPORTED)
DTYPE_IDS = [_dt.short_name(d) for d in DTYPES]
VARIANTS = [("folklore", None), ("folklore", "kahan"), ("folklore", "neumaier"), ("alman", None)]
VARIANT_IDS = ["folklore", "kahan", "neumaier", "alman"]


@pytest.fixture
def rng(request):
    # a fresh, reproducible stream per test
    return np.random.default_rng(abs(hash(request.node.nodeid)) % (2**32))
