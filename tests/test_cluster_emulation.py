"""The cluster pass kernel (``fwht_cluster_pass``, kernels/cluster_pass.cuh) emulated unit by
unit on the CPU, for every configuration the planner ships: the template arguments' traits
(round 0's vectors or items, the shared rounds, the cluster round's slices, 16-bit pairs), the
kernel's addressing and loops, with coverage checks (every shared slot and every output unit
written exactly once), against the pass's stages applied directly (exact int64 arithmetic: the
index arithmetic), and through a small-tile plan's two cluster passes against the NumPy
engine's float32 bits."""
import numpy as np
import pytest

import fwht_gpu as F
from fwht_gpu.cuda import config
from fwht_gpu.cuda.device import H100


def pad_shift(ub):
    """log2 of the units between two padding slots (tile.cuh's pad_shift)."""
    return {8: 4, 4: 5, 2: 6}[ub]


def radix2(v, k):
    """Radix-2 stages on bits 0 .. k-1 of axis 0 of v, ascending (butterflies.cuh)."""
    for m in range(k):
        for j in range(v.shape[0]):
            if j < (1 << k) and not (j & (1 << m)):
                a, c = v[j].copy(), v[j | (1 << m)].copy()
                v[j], v[j | (1 << m)] = a + c, a - c


def round_item(item, b, k, rows, log_g, strided):
    """(group, first row) of the items of a round over row bits [b, b + k) (tile.cuh's
    round_item, on arrays of items)."""
    if strided:
        g, q = item & ((1 << log_g) - 1), item >> log_g
    else:
        qn = rows >> k
        q, g = item & (qn - 1), item // qn
    return g, ((q >> b) << (b + k)) | (q & ((1 << b) - 1))


def slice_positions(q, slice_units, threads, strided, log_g):
    """(group, row) of the positions block q of a cluster finishes in the cluster round, a
    step of its threads at a time (both cluster kernels' slice loop)."""
    tid = np.arange(threads)
    for e0 in range(q * slice_units, (q + 1) * slice_units, threads):
        e = e0 + tid
        e = e[e < (q + 1) * slice_units]
        yield (e & ((1 << log_g) - 1), e >> log_g) if strided else (np.zeros_like(e), e)


def traits(c):
    """ClusterPassTraits / PassTraits of the configuration c, as the kernel derives them."""
    P = c.paired
    S = c.strided
    UE = 2 if P else 1
    pir = P and not S
    LUR = c.log_r - (1 if pir else 0)
    LUG = c.log_g - (1 if (P and S) else 0)
    UR, UG = 1 << LUR, 1 << LUG
    TU = UR * UG
    TH = 1 << c.log_t
    UPV = c.vec // UE
    LUPV = UPV.bit_length() - 1
    VPT = (TU // UPV) // TH
    VIF = min(VPT, 2 if UPV >= 8 else 4)
    LE = c.log_e
    lim = LE if S else LUPV
    FRB = min(lim, LUR)
    bounds = []
    i = 0
    while True:
        b = min(FRB + LE * i, LUR)
        bounds.append(b)
        if b >= LUR:
            break
        i += 1
    ub_bytes = c.itemsize * UE
    assert VPT >= 1 and (TU >> FRB) >= TH and FRB <= LE
    return dict(UE=UE, pir=pir, LUR=LUR, LUG=LUG, UR=UR, UG=UG, TU=TU, TH=TH, UPV=UPV, VPT=VPT,
                VIF=VIF, LE=LE, FRB=FRB, bounds=bounds, sh=pad_shift(ub_bytes))


def simulate(c, src, first_bit):
    """The pass of configuration c on src (int64, or float32 rounded as the kernel rounds), unit by
    unit as the kernel runs it."""
    T = traits(c)
    S = c.strided
    C = 1 << c.log_cl
    UE, UR, UG, TU, TH = T["UE"], T["UR"], T["UG"], T["TU"], T["TH"]
    pad = lambda i: i + (i >> T["sh"])
    slot = (lambda g, r: pad(r * UG + g)) if S else (lambda g, r: pad(r + g * UR))
    usrc = src.reshape(-1, UE)           # units (lanes last)
    udst = np.zeros_like(usrc)
    written = np.zeros(len(usrc), int)
    inner = 1 << first_bit
    uinner = inner // UE
    ntiles = src.size // (1 << (c.log_r + c.log_g))
    assert ntiles % C == 0
    tpo = inner >> c.log_g if S else 1
    npad = TU + ((TU - 1) >> T["sh"])
    for ct in range(ntiles // C):
        if S:
            o, cbk = divmod(ct, tpo)
            cb = (o * (1 << (c.log_r + c.log_cl + first_bit)) + (cbk << c.log_g)) // UE
        else:
            cb = ct * (TU << c.log_cl)
        sms = []
        for q in range(C):
            sm = np.full((npad, UE), -10**18, dtype=src.dtype)
            sw = np.zeros(npad, int)
            ub = cb + (q * UR * uinner if S else q * UR)
            gidx = (lambda g, r: ub + r * uinner + g) if S else (lambda g, r: ub + g * UR + r)
            tid = np.arange(TH)
            FRB = T["FRB"]
            if not S:
                UPV, VIF = T["UPV"], T["VIF"]
                for c0 in range(0, T["VPT"], VIF):
                    for i in range(VIF):
                        vi = (c0 + i) * TH + tid
                        u0 = vi * UPV
                        w = np.stack([usrc[ub + u0 + k] for k in range(UPV)])    # (UPV, TH, UE)
                        if T["pir"]:
                            a, b = w[..., 0].copy(), w[..., 1].copy()
                            w[..., 0], w[..., 1] = a + b, a - b
                        for blk in range(0, UPV, 1 << FRB):
                            sub = w[blk:blk + (1 << FRB)]
                            radix2(sub, FRB)
                            w[blk:blk + (1 << FRB)] = sub
                        for k in range(UPV):
                            s = pad(u0 + k)
                            sm[s] = w[k]
                            np.add.at(sw, s, 1)
            else:
                items = (TU >> FRB) // TH
                for it in range(items):
                    item = it * TH + tid
                    g = item & (UG - 1)
                    r0 = (item >> T["LUG"]) << FRB
                    w = np.stack([usrc[gidx(g, r0 + j)] for j in range(1 << FRB)])
                    radix2(w, FRB)
                    for j in range(1 << FRB):
                        s = slot(g, r0 + j)
                        sm[s] = w[j]
                        np.add.at(sw, s, 1)
            assert (np.sort(sw)[-TU:] == 1).all() and sw.sum() == TU, "round 0 coverage"
            bnd = T["bounds"]
            for ri in range(len(bnd) - 1):
                b, k = bnd[ri], bnd[ri + 1] - bnd[ri]
                items = (TU >> k) // TH
                assert items >= 1 and (TU >> k) % TH == 0
                touched = np.zeros(npad, int)
                for it in range(items):
                    g, r0 = round_item(it * TH + tid, b, k, UR, T["LUG"], S)
                    idx = [slot(g, r0 | (j << b)) for j in range(1 << k)]
                    v = np.stack([sm[s] for s in idx])
                    radix2(v, k)
                    for j, s in enumerate(idx):
                        sm[s] = v[j]
                        np.add.at(touched, s, 1)
                assert touched.sum() == TU and touched.max() == 1, "round coverage"
            sms.append(sm)
        SL = TU >> c.log_cl
        for q in range(C):
            for g, r in slice_positions(q, SL, TH, S, T["LUG"]):
                s = slot(g, r)
                v = np.stack([sms[j][s] for j in range(C)])
                radix2(v, c.log_cl)
                for j in range(C):
                    row = j * UR + r
                    at = cb + row * uinner + g if S else cb + row
                    udst[at] = v[j]
                    np.add.at(written, at, 1)
    assert (written == 1).all(), "output coverage"
    return udst.reshape(-1)


def _reference(x, first_bit, nbits):
    """Radix-2 stages on bits first_bit .. first_bit + nbits - 1 of x, ascending: the pass."""
    y = x.copy()
    for b in range(first_bit, first_bit + nbits):
        t = y.reshape(-1, 2, 1 << b)
        a, c = t[:, 0].copy(), t[:, 1].copy()
        t[:, 0], t[:, 1] = a + c, a - c
    return y


#: Clusters of 2 and 16 (the smallest and the largest); every dtype and shape the planner makes.
CONFIGS = [c for c in config.all_cluster_configs()
           if isinstance(c, config.ClusterConfig) and c.log_cl in (1, 4)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_cluster_kernel_emulated_gives_its_pass(cfg):
    rng = np.random.default_rng(0)
    nbits = cfg.log_r + cfg.log_cl
    first_bit = cfg.log_g + 1 if cfg.strided else 0          # two outer blocks when strided
    total = (2 << (nbits + first_bit)) if cfg.strided else (2 << nbits)
    x = rng.integers(-50, 50, total).astype(np.int64)
    assert np.array_equal(simulate(cfg, x, first_bit), _reference(x, first_bit, nbits))


def test_cluster_pass_addressing_gives_the_transform():
    """Small tiles (a tuning that makes 2^14 take clustered passes) through the kernel,
    emulated: the two cluster passes give the NumPy engine's bits."""
    t = F.Tuning(single_pass_bytes=256, tile_bytes=256, strided_tile_bytes=128, segment_bytes=16,
                 max_tile_bytes=256, wide_tile_bytes=256, cluster_tile_bytes=256,
                 cluster_segment_bytes=16, cluster_log=2, min_tile_bytes=256)
    x = np.random.default_rng(0).standard_normal((4, 1 << 14)).astype(np.float32)
    for L in (12, 14):
        plan = F.make_plan(1 << L, np.float32, device="cuda", tuning=t, clusters=2)
        assert plan.clustered and len(plan.passes) == 2, plan.describe()
        y = x[:, :1 << L].ravel()
        for p, cfg in zip(plan.passes, config.configs_for(plan, y.size, H100)):
            assert isinstance(cfg, config.ClusterConfig)
            y = simulate(cfg, y, p.first_bit)
        assert np.array_equal(y.reshape(4, -1).view(np.uint32),
                              F.fwht(x[:, :1 << L]).view(np.uint32)), plan.describe()


def _stab_butterfly(A, B, eA, eB, neumaier):
    """butterflies.cuh's stab_butterfly, every operation in the arrays' dtype."""
    eS, eD = eA + eB, eA - eB
    A1, B1 = (A + B) - eS, (A - B) - eD
    if not neumaier:
        return A1, B1, ((A1 - A) - B) + eS, ((B1 - A) + B) + eD
    a1, a, b, b1 = abs(A1), abs(A), abs(B), abs(B1)
    t = np.where((a1 >= b) & (a >= b), (A1 - A) - B,
                 np.where((a1 >= a) & (b >= a), (A1 - B) - A, (-A - B) + A1))
    u = np.where((b1 >= b) & (a >= b), (B1 - A) + B,
                 np.where((b1 >= a) & (b >= a), (B1 + B) - A, (-A + B) + B1))
    return A1, B1, t + eS, u + eD


def _stab_stages(v, e, k, neumaier):
    """stab_radix2_stages: compensated stages on bits 0 .. k-1 of axis 0, ascending."""
    for m in range(k):
        for j in range(v.shape[0]):
            if j < (1 << k) and not (j & (1 << m)):
                o = j | (1 << m)
                v[j], v[o], e[j], e[o] = _stab_butterfly(v[j].copy(), v[o].copy(), e[j].copy(),
                                                          e[o].copy(), neumaier)


def simulate_stabilized(c, src, dst, err, first_bit, first, last):
    """One launch of the stabilized cluster pass of configuration c (``fwht_stabilized_cluster_pass``)
    as the kernel addresses and computes it: its load (stabilized_vec_global/_shared: values, and
    past the first pass their errors), compensated rounds (stabilized_round's items) and cluster
    round, the stores of values and errors (or the folded values in the last pass), every slot
    and output written once; in place allowed (src is dst, err read before it is written)."""
    S, C, neu = c.strided, 1 << c.log_cl, c.stab == 2
    R, G = 1 << c.log_r, 1 << c.log_g
    TILE, TH, VEC = R * G, 1 << c.log_t, c.vec
    VPR = G // VEC if S else 1
    VPT = TILE // VEC // TH
    VIF = min(VPT, 4)
    assert VPT >= 1 and (TILE >> c.log_cl) % TH == 0
    sh = pad_shift(c.itemsize)
    pad = lambda i: i + (i >> sh)
    slot = (lambda g, r: pad(r * G + g)) if S else (lambda g, r: pad(r + g * R))
    written = np.zeros(src.size, int)
    inner = 1 << first_bit
    ntiles = src.size // TILE
    assert ntiles % C == 0
    tpo = inner >> c.log_g if S else 1
    npad = pad(TILE)                                # padded_end: the errors start there
    tid = np.arange(TH)
    for ct in range(ntiles // C):
        if S:
            o, cbk = divmod(ct, tpo)
            cb = o * ((R << c.log_cl) << first_bit) + (cbk << c.log_g)
        else:
            cb = ct * (TILE << c.log_cl)
        sms = []
        for q in range(C):
            base = cb + (q * R * inner if S else q * TILE)
            sx = np.zeros(2 * npad, dtype=src.dtype)           # values, then errors at npad
            sw = np.zeros(npad, int)
            for c0 in range(0, VPT, VIF):
                for i in range(VIF):
                    v = (c0 + i) * TH + tid
                    r = v // VPR
                    g0 = base + r * inner + (v - r * VPR) * VEC if S else base + v * VEC
                    for k in range(VEC):
                        s = pad(r * G + (v - r * VPR) * VEC + k) if S else pad(v * VEC + k)
                        sx[s] = src[g0 + k]
                        sx[npad + s] = 0 if first else err[g0 + k]
                        np.add.at(sw, s, 1)
            assert sw.sum() == TILE and sw.max() == 1, "load coverage"
            for b in range(0, c.log_r, c.log_e):
                k = min(c.log_e, c.log_r - b)
                items = (TILE >> k) // TH
                assert items >= 1 and (TILE >> k) % TH == 0
                touched = np.zeros(npad, int)
                for it in range(items):
                    g, r0 = round_item(it * TH + tid, b, k, R, c.log_g, S)
                    idx = [slot(g, r0 | (j << b)) for j in range(1 << k)]
                    v, e = np.stack([sx[s] for s in idx]), np.stack([sx[npad + s] for s in idx])
                    _stab_stages(v, e, k, neu)
                    for j, s in enumerate(idx):
                        sx[s], sx[npad + s] = v[j], e[j]
                        np.add.at(touched, s, 1)
                assert touched.sum() == TILE and touched.max() == 1, "round coverage"
            sms.append(sx)
        SL = TILE >> c.log_cl
        for q in range(C):
            for g, r in slice_positions(q, SL, TH, S, c.log_g):
                s = slot(g, r)
                v = np.stack([sms[j][s] for j in range(C)])
                ev = np.stack([sms[j][npad + s] for j in range(C)])
                _stab_stages(v, ev, c.log_cl, neu)
                for j in range(C):
                    row = j * R + r
                    at = cb + row * inner + g if S else cb + row
                    if last:
                        dst[at] = v[j] - ev[j]
                    else:
                        dst[at], err[at] = v[j], ev[j]
                    np.add.at(written, at, 1)
    assert (written == 1).all(), "output coverage"
    return dst


#: The stabilized cluster passes: clusters of 2 and 16, every dtype and shape the planner makes.
STABILIZED = [c for c in config.all_cluster_configs()
              if isinstance(c, config.StabilizedClusterConfig) and c.log_cl in (1, 4) and c.stab == 1]


@pytest.mark.parametrize("cfg", STABILIZED, ids=[c.name for c in STABILIZED])
def test_stabilized_cluster_kernel_emulated_gives_its_pass(cfg):
    rng = np.random.default_rng(1)
    nbits = cfg.log_r + cfg.log_cl
    first_bit = cfg.log_g + 1 if cfg.strided else 0          # two outer blocks when strided
    total = (2 << (nbits + first_bit)) if cfg.strided else (2 << nbits)
    x = rng.integers(-50, 50, total).astype(np.int64)      # (exact: the errors stay 0)
    y = simulate_stabilized(cfg, x.copy(), np.zeros_like(x), np.zeros_like(x), first_bit, True, False)
    assert np.array_equal(y, _reference(x, first_bit, nbits))


def test_stabilized_cluster_passes_are_planned_and_keep_the_bits():
    """The global stabilizers take two cluster passes (Neumaier in FP64 only unless a tuning
    asks); the ``-pass`` stabilizers never (their bits depend on the
    grouping); the NumPy engine gives a clustered stabilized plan the bits of one pass, and
    small tiles through the emulated kernel (values and errors) give the NumPy engine's bits."""
    on = F.Tuning(cluster_stabilized=True, cluster_neumaier_itemsize=0)
    for st in ("kahan", "neumaier"):
        p = F.make_plan(1 << 30, np.float32, stabilizer=st, device="cuda", clusters=4, tuning=on)
        assert tuple((q.nbits, q.cluster_bits) for q in p.passes) == ((17, 4), (13, 4))
        assert all(isinstance(c, config.StabilizedClusterConfig) and c.errvec
                   for c in config.configs_for(p, 1 << 30, H100))
    # by default Kahan in every dtype, Neumaier (arithmetic-bound in FP32/FP16) in FP64 only
    default = {(st, dt): F.make_plan(1 << 28, dt, stabilizer=st, device="cuda", clusters=4).clustered
               for st in ("kahan", "neumaier") for dt in (np.float16, np.float32, np.float64)}
    assert default == {("kahan", np.float16): True, ("kahan", np.float32): True,
                       ("kahan", np.float64): True, ("neumaier", np.float16): False,
                       ("neumaier", np.float32): False, ("neumaier", np.float64): True}
    assert not F.make_plan(1 << 30, np.float32, stabilizer="kahan", device="cuda", clusters=4,
                           tuning=F.Tuning(cluster_stabilized=False)).clustered
    assert not F.make_plan(1 << 26, np.float32, stabilizer="kahan-pass", device="cuda", clusters=4,
                           tuning=on).clustered
    rng = np.random.default_rng(2)
    for dt in (np.float32, np.float16):      # (the NumPy engine: two passes' bits are one's)
        item = np.dtype(dt).itemsize
        small = F.Tuning(single_pass_bytes=64 * item, tile_bytes=64 * item, max_tile_bytes=64 * item,
                         strided_tile_bytes=32 * item, segment_bytes=2 * item, cluster_log=2,
                         wide_tile_bytes=64 * item, cluster_tile_bytes=64 * item,
                         cluster_segment_bytes=2 * item, min_tile_bytes=64 * item,
                         cluster_stabilized=True, cluster_neumaier_itemsize=0)
        x = (rng.standard_normal(1 << 12) * 100).astype(dt)
        two = F.make_plan(1 << 12, dt, stabilizer="neumaier", device="cuda", clusters=2, tuning=small)
        one = F.make_plan(1 << 12, dt, stabilizer="neumaier")
        assert two.clustered and len(two.passes) == 2 and len(one.passes) == 1
        u = np.uint16 if dt == np.float16 else np.uint32
        assert np.array_equal(F.run_plan(two, x).view(u), F.run_plan(one, x).view(u))
    # float values and errors through the emulated kernel, both passes in place, against the
    # NumPy engine's bits of the stabilized transform without clusters (small tiles)
    for st in ("kahan", "neumaier"):
        for dt in (np.float32, np.float64):
            item = np.dtype(dt).itemsize
            t = F.Tuning(single_pass_bytes=64 * item, tile_bytes=64 * item,
                         strided_tile_bytes=32 * item, segment_bytes=2 * item,
                         max_tile_bytes=64 * item, wide_tile_bytes=64 * item,
                         cluster_tile_bytes=64 * item, cluster_segment_bytes=2 * item,
                         cluster_log=2, min_tile_bytes=64 * item, cluster_stabilized=True,
                         cluster_neumaier_itemsize=0)
            plan = F.make_plan(1 << 12, dt, stabilizer=st, device="cuda", tuning=t, clusters=2)
            assert len(plan.passes) == 2 and all(p.cluster_bits for p in plan.passes), plan.describe()
            x = (rng.standard_normal((3, 1 << 12)) * 1e3).astype(dt)
            y, err = x.ravel().copy(), np.full(x.size, np.nan, dtype=dt)
            for i, (p, cfg) in enumerate(zip(plan.passes, config.configs_for(plan, x.size, H100))):
                assert isinstance(cfg, config.StabilizedClusterConfig)
                simulate_stabilized(cfg, y, y, err, p.first_bit, i == 0, i == len(plan.passes) - 1)
            want = F.run_plan(F.make_plan(1 << 12, dt, stabilizer=st), x)
            u = {4: np.uint32, 8: np.uint64}[item]
            assert np.count_nonzero(err), "errors carried between the passes"
            assert np.array_equal(y.reshape(3, -1).view(u), want.view(u)), (st, dt)
            assert not np.array_equal(want.view(u), F.fwht(x).view(u))   # (the compensation shows)
