"""Parameters shared by the CPU test rooms (imported, not fixtures)."""
from fwht_gpu import dtypes as _dt

DTYPES = list(_dt.SUPPORTED)
DTYPE_IDS = [_dt.short_name(d) for d in DTYPES]
#: The variants of the stage-level CPU tests: (algorithm, stabilizer).
VARIANTS = [("folklore", None), ("folklore", "kahan"), ("folklore", "neumaier"), ("alman", None)]
VARIANT_IDS = ["folklore", "kahan", "neumaier", "alman"]


def heavy_background_product():
    """(A, B): a product whose ||AB||_F / sqrt(2k) overestimates its top-5 values (400 entries
    of +-50 around five of 150, B the identity), so an automatic sketch for top_k(5) is too
    small and a certified query must grow it."""
    import numpy as np
    rng = np.random.default_rng(6)
    A = np.zeros((160, 140))
    flat = rng.choice(A.size, 405, replace=False)
    A.ravel()[flat[:400]] = rng.choice([-50.0, 50.0], 400)
    A.ravel()[flat[400:]] = 150.0
    return A, np.eye(140)
