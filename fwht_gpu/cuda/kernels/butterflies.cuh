// Butterflies of the fwht_gpu kernels, on values held in registers: radix-2 stages,
// Alman-Rao's H8 blocks, pre-scaling exponents and round layout, and the compensated
// (Kahan/Neumaier) butterflies of the stabilizers.  Independent of any kernel: W is
// a work type of numeric.cuh, v[j] the value at offset j of the register index.
#pragma once

#include "numeric.cuh"

// Radix-2 stages on bits 0 .. k-1 of the register index (k <= LOG_K), lowest first, on the
// registers below 2^k (ALL: on all 2^LOG_K registers, groups of 2^k side by side).
template <typename W, int LOG_K, bool ALL = false>
__device__ __forceinline__ void radix2_stages(W* v, int k) {
    typedef Num<W> N;
#pragma unroll
    for (int m = 0; m < LOG_K; ++m) {
        if (m < k) {
#pragma unroll
            for (int j = 0; j < (1 << LOG_K); ++j) {
                if ((ALL || j < (1 << k)) && !(j & (1 << m))) {
                    const W a = v[j], c = v[j | (1 << m)];
                    v[j] = N::add(a, c);
                    v[j | (1 << m)] = N::sub(a, c);
                }
            }
        }
    }
}

// ===========================================================================
// Alman-Rao (thesis Alg. 9): PRE radix-2 stages, the pre-scaling by 2^(number of non-zero
// octal digits of i >> PRE), then H8 blocks on whole octal digits.
// ===========================================================================

// Alman-Rao H8 block on v[0..7] (inputs 1..7 pre-doubled), thesis Alg. 9 lines 33-48.
template <typename W>
__device__ __forceinline__ void h8_block(W* v) {
    typedef Num<W> N;
    const W a = v[0], b = v[1], c = v[2], d = v[3], e = v[4], f = v[5], g = v[6], h = v[7];
    const W B1 = N::add(b, c), B2 = N::add(d, h), B3 = N::add(f, g);
    const W tot = whalf(N::add(N::add(N::add(B1, B2), B3), e));
    const W diff = N::sub(a, tot);
    const W D = N::add(diff, d), E = N::add(diff, e), H = N::add(diff, h);
    v[0] = N::add(a, tot);
    v[1] = N::add(N::add(E, c), g);
    v[2] = N::add(N::add(E, b), f);
    v[3] = N::add(E, B2);
    v[4] = N::add(D, B1);
    v[5] = N::add(N::add(H, c), f);
    v[6] = N::add(N::add(H, b), g);
    v[7] = N::add(D, B3);
}

// Alman-Rao pre-scaling exponent of transform index i: the non-zero octal digits of
// i >> fbits (fbits: the radix-2 prefix bits).
__device__ __forceinline__ int alman_exponent(i64 i, int fbits) {
    const unsigned long long v = (unsigned long long)i >> fbits;
    return __popcll((v | (v >> 1) | (v >> 2)) & 0x9249249249249249ULL);
}

// Round boundaries of a pass (row bits, in units).  Round 0 covers [0, K0); middle
// round i covers [bound(i), bound(i + 1)).  Folklore: rounds of LOG_E bits.  Alman-Rao:
// the PRE radix-2 prefix bits, then whole H8 blocks (3 bits each, as many as fit in
// LOG_E bits) per round, so that no H8 block straddles two rounds.
template <int ALG, int LR, int LOG_E, int PRE>
struct Rounds {
    static constexpr int STEP = ALG == 0 ? LOG_E : 3 * (LOG_E / 3);
    // the widest round 0 within `lim` bits (lim: the bits a thread loads at once)
    __host__ __device__ static constexpr int first(int lim) {
        const int l = lim < LR ? lim : LR;
        return ALG == 0 ? l : (l <= PRE ? l : PRE + 3 * ((l - PRE) / 3));
    }
    __host__ __device__ static constexpr int bound(int k0, int i) {
        const int b = (ALG == 1 && k0 < PRE) ? (i == 0 ? k0 : PRE + STEP * (i - 1)) : k0 + STEP * i;
        return b < LR ? b : LR;
    }
    __host__ __device__ static constexpr int count(int k0) {   // middle rounds
        int i = 0;
        while (bound(k0, i) < LR) ++i;
        return i;
    }
};

// The stages of one round over bits [b, b + k) (k <= LOG_E) on v[0 .. 2^k) (v[j]: bit
// offset j << b): ALG 0 (Folklore) k radix-2 stages; ALG 1 (Alman-Rao) the radix-2 stages
// of the bits below PRE, then, when PRESCALE and bit PRE lies in the round, the pre-scaling
// of v[j] by 2^alman_exponent(idx(j) mod 2^log2n, fbits) (idx(j): v[j]'s index in the
// array, of single values; mod 2^log2n, its index in its transform), then H8 blocks on
// whole octal digits from bit PRE up.
template <typename W, int LOG_E, int ALG, int PRE, bool PRESCALE, typename Idx>
__device__ __forceinline__ void round_stages(W* v, int b, int k, Idx idx, int log2n, int fbits) {
    constexpr int E = 1 << LOG_E;
    if constexpr (ALG == 0) {
        radix2_stages<W, LOG_E>(v, k);
    } else {
        const int r2 = (PRE < b + k ? PRE : b + k) - b;    // radix-2 prefix bits here
        if (r2 > 0) radix2_stages<W, LOG_E>(v, r2);
        if constexpr (PRESCALE) {
            if (b <= PRE && PRE < b + k) {
#pragma unroll
                for (int j = 0; j < E; ++j)
                    if (j < (1 << k)) {
                        const int ex = alman_exponent(idx(j) & (((i64)1 << log2n) - 1), fbits);
                        if (ex) v[j] = wpow2(v[j], ex);
                    }
            }
        }
#pragma unroll
        for (int m = 0; m + 3 <= LOG_E; m += 3) {
            const int mm = m + (PRE > b ? PRE - b : 0);
            if (mm + 3 <= k) {
#pragma unroll
                for (int j = 0; j < E; ++j) {
                    if (j < (1 << k) && !((j >> mm) & 7)) {
                        W h[8];
#pragma unroll
                        for (int r = 0; r < 8; ++r) h[r] = v[j | (r << mm)];
                        h8_block<W>(h);
#pragma unroll
                        for (int r = 0; r < 8; ++r) v[j | (r << mm)] = h[r];
                    }
                }
            }
        }
    }
}

// Alman-Rao's first round on the single values of NU pair units w[0 .. NU) (2 * NU
// elements, element e0 first; U: a pair type of Lanes<>), so that no later H8 block
// involves the bit inside the pairs: per block of 2^LOG_BLOCK elements (LOG_BLOCK = PRE, or
// 3 with PRE = 0), the PRE radix-2 stages, the pre-scaling (the block shares the exponent of
// its first element, the same i >> PRE; with PRE = 0 elements 1..7 have one more non-zero
// octal digit), then with PRE = 0 its H8 block.
template <typename U, int NU, int LOG_BLOCK, int PRE>
__device__ __forceinline__ void alman_singles_round(U* w, i64 e0, int log2n, int fbits) {
    typedef Lanes<U> LN;
    typedef typename LN::L L;
    L s[2 * NU];
#pragma unroll
    for (int k = 0; k < NU; ++k) { s[2 * k] = LN::lo(w[k]); s[2 * k + 1] = LN::hi(w[k]); }
#pragma unroll
    for (int blk = 0; blk < 2 * NU; blk += 1 << LOG_BLOCK) {
        L* v = s + blk;
        radix2_stages<L, LOG_BLOCK>(v, PRE);
        const int base = alman_exponent((e0 + blk) & (((i64)1 << log2n) - 1), fbits);
#pragma unroll
        for (int j = 0; j < (1 << LOG_BLOCK); ++j) {
            const int ex = base + (PRE == 0 && j != 0 ? 1 : 0);
            if (ex) v[j] = wpow2(v[j], ex);
        }
        if constexpr (PRE == 0) h8_block<L>(v);
    }
#pragma unroll
    for (int k = 0; k < NU; ++k) w[k] = LN::make(s[2 * k], s[2 * k + 1]);
}

// ===========================================================================
// Compensated butterflies (thesis 3.3): every value x carries an error e, the true
// value being x - e.
// ===========================================================================

// Stabilized butterfly (thesis 3.3.1 Kahan / 3.3.2 Neumaier); the true value is x - e.
template <typename W, bool NEU>
__device__ __forceinline__ void stab_butterfly(W& A, W& B, W& eA, W& eB) {
    typedef Num<W> N;
    const W eS = N::add(eA, eB), eD = N::sub(eA, eB);
    const W A1 = N::sub(N::add(A, B), eS);
    const W B1 = N::sub(N::sub(A, B), eD);
    W eA1, eB1;
    if (!NEU) {
        eA1 = N::add(N::sub(N::sub(A1, A), B), eS);
        eB1 = N::add(N::add(N::sub(B1, A), B), eD);
    } else {
        const double a1 = wabs(A1), a = wabs(A), b = wabs(B), b1 = wabs(B1);
        W t;
        if (a1 >= b && a >= b) t = N::sub(N::sub(A1, A), B);
        else if (a1 >= a && b >= a) t = N::sub(N::sub(A1, B), A);
        else t = N::add(N::sub(wneg(A), B), A1);
        eA1 = N::add(t, eS);
        if (b1 >= b && a >= b) t = N::add(N::sub(B1, A), B);
        else if (b1 >= a && b >= a) t = N::sub(N::add(B1, B), A);
        else t = N::add(N::add(wneg(A), B), B1);
        eB1 = N::add(t, eD);
    }
    A = A1; B = B1; eA = eA1; eB = eB1;
}

// Compensated radix-2 stages on bits 0 .. k-1 of the register index (k <= LOG_K), lowest
// first: values v, errors e; NEU: Neumaier's butterfly, else Kahan's.
template <typename W, int LOG_K, bool NEU>
__device__ __forceinline__ void stab_radix2_stages(W* v, W* e, int k) {
    const int J = 1 << k;
#pragma unroll
    for (int m = 0; m < LOG_K; ++m) {
        if (m < k) {
#pragma unroll
            for (int j = 0; j < (1 << LOG_K); ++j)
                if (j < J && !(j & (1 << m)))
                    stab_butterfly<W, NEU>(v[j], v[j | (1 << m)], e[j], e[j | (1 << m)]);
        }
    }
}
