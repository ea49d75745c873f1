"""Parameters shared by the CPU test rooms (imported, not fixtures)."""
from fwht_gpu import dtypes as _dt

DTYPES = list(_dt.SUPPORTED)
DTYPE_IDS = [_dt.short_name(d) for d in DTYPES]
#: The variants of the stage-level CPU tests: (algorithm, stabilizer).
VARIANTS = [("folklore", None), ("folklore", "kahan"), ("folklore", "neumaier"), ("alman", None)]
VARIANT_IDS = ["folklore", "kahan", "neumaier", "alman"]
