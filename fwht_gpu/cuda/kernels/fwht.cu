// fwht_gpu CUDA kernels: one launch = one pass of a Plan.
//
// A pass covers index bits [first_bit, first_bit + LOG_R) of every transform:
// it loads tiles of R = 2^LOG_R "rows" (the elements that differ in those
// bits) times G = 2^LOG_G "groups" into shared memory, applies the pass's
// radix-2 stages from the lowest bit up, and writes the tile back.
//
//  * contiguous pass (first_bit = 0): a tile is G consecutive chunks of R
//    consecutive elements (TILE contiguous elements);
//  * strided pass (first_bit > 0, inner = 2^first_bit): a tile is R rows at
//    stride `inner` of G consecutive columns (G * sizeof(T) contiguous bytes
//    per row: a 128-byte segment when the stride allows).
//
// Global memory is accessed with VEC-element vectors (16 bytes when possible) or,
// where a round is fused with the load or store, with one unit per thread and
// consecutive units across a warp.  Each round gives every thread 2^k units of one
// group (k <= LOG_E stages), which it transforms in registers.  Every addition and
// subtraction is rounded to the compute type (the storage type T unless a wider
// compute_dtype is planned; FP16/BF16 with the native correctly rounded
// half-precision add/sub), in the same order as the NumPy engine, so the two engines
// return identical bits.  Indices are 64-bit.
//
// The kernels, built from the blocks of this folder:
//  * fwht_pass (fwht_pass.cuh): Folklore or Alman-Rao stages, any compute type;
//  * fwht_stabilized_pass (stabilized_pass.cuh): Kahan/Neumaier compensated stages.
// Building blocks: numeric.cuh (work types, conversions), tile.cuh (tile addressing,
// shared-memory padding, cp.async staging, launch bounds), butterflies.cuh (radix-2,
// H8 and compensated butterflies, Alman-Rao rounds), overflow.cuh (per-transform
// non-finite marking).  Each kernel has a traits struct (PassTraits,
// StabilizedPassTraits) whose SMEM_BYTES is the dynamic shared memory of a launch.
//
// This is the translation unit the library compiles (NVRTC) and CI compiles (nvcc --ptx);
// its local includes are quoted, relative to this folder, one per line.
#include "fwht_pass.cuh"
#include "stabilized_pass.cuh"
