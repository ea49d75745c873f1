// fwht_gpu CUDA kernels of the lengths n = K * 2^k (H_K (x) H_{2^k}, K a shipped Hadamard
// order): fwht_k_rows (the whole transform of rows that fit in shared memory, one pass)
// and fwht_k_stage (the K-point stage after the power-of-two passes of fwht.cu); see
// k_stage.cuh.  Its own translation unit, so that the power-of-two kernels' compile
// cache does not depend on it.
//
// This is the translation unit the library compiles (NVRTC) and CI compiles (nvcc --ptx);
// its local includes are quoted, relative to this folder, one per line.
#include "k_stage.cuh"
