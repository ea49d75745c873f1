"""JAX arrays given to fwht_gpu.fwht: read through DLPack without a copy, the result a JAX
array again, with the NumPy engine's bits. Skipped where JAX is not installed."""
import ml_dtypes
import numpy as np
import pytest

import fwht_gpu as F

jnp = pytest.importorskip("jax.numpy")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_jax_arrays_give_the_engine_bits(dtype):
    x = np.random.default_rng(0).standard_normal((3, 96)).astype(dtype)
    jx = jnp.asarray(x)
    y = F.fwht(jx)
    assert type(y).__module__.split(".")[0] in ("jax", "jaxlib") and y.dtype == x.dtype
    assert np.array_equal(np.asarray(y).view(np.uint8), F.fwht(x).view(np.uint8))
    z = F.ifwht(y, order="natural", norm="ortho")
    assert np.array_equal(np.asarray(z).view(np.uint8),
                          F.ifwht(F.fwht(x), norm="ortho").view(np.uint8))
