"""The one summation order of pagh_mm: a pairwise tree over the summation index.

A sum x_0 + ... + x_{n-1} is evaluated as a binary tree over the indices: level by
level, x_{2i} + x_{2i+1}; an element without a partner (the last one of an odd count)
moves up unchanged.  The result is a function of the summands alone, and any split of
the index range into aligned blocks of 2**j consecutive indices reproduces it: each
block's own pairwise sum is a node of the tree, and the nodes are combined as the tree
combines them.  So the sketch of A @ B has the same bits whatever memory budget,
device, and (later) number of GPUs or workers compressed it, as long as each of them
sums an aligned block.  Its rounding error grows with log2(n), not n.

Every operation is an elementwise addition of NumPy or CuPy arrays (correctly rounded
on both), so the CPU and the GPU give the same bits.
"""
from __future__ import annotations


def block_sum(values, xp):
    """Pairwise tree sum over axis 0 of ``values`` (destroyed: the sums are formed in place);
    returns an array of ``values.shape[1:]``."""
    if values.shape[0] == 0:
        return xp.zeros(values.shape[1:], dtype=values.dtype)
    v = values
    while v.shape[0] > 1:
        half = v.shape[0] // 2
        xp.add(v[0:2 * half:2], v[1:2 * half:2], out=v[0:2 * half:2])
        v = v[::2]
    return v[0].copy()


def tree_sum(pos, values, xp):
    """Pairwise tree sum over axis 0 of ``values`` whose rows sit at the sorted, distinct
    positions ``pos`` of a longer sequence whose other terms are zero: the same value as
    :func:`block_sum` of that sequence (a missing term is absent, and x + 0 = x)."""
    while values.shape[0] > 1:
        parent = pos >> 1
        pair = parent[1:] == parent[:-1]                   # siblings 2i and 2i + 1
        if bool(pair.any()):
            first = xp.nonzero(pair)[0]
            values[first] = values[first] + values[first + 1]
            keep = xp.ones(pos.shape[0], dtype=bool)
            keep[first + 1] = False
            values, parent = values[keep], parent[keep]
        pos = parent
    return values[0].copy()


def _plus(left, right):
    """Tree addition where a subtree without terms is absent (None)."""
    if left is None:
        return right
    return left if right is None else left + right


class PairwiseSum:
    """Streaming pairwise tree sum of arrays given in aligned blocks.

    ``add(first, values, pos)``: the summands of the block ``first .. first + block - 1``
    (``first`` a multiple of ``block``, a power of two; blocks in increasing order): ``values``
    holds those at the local positions ``pos`` (default: all, from 0), the others are zero.
    Blocks whose terms are all zero may be left out: they are absent nodes of the tree
    (pushed as aligned runs, so a long gap costs O(log) steps).  Keeps at most
    log2(number of blocks) + 1 partial sums.

    ``start``: the sum covers the summands from ``start`` (a multiple of ``block``) on, a
    part of a longer sum: its :meth:`merge` into the sum of the summands before ``start``
    gives the longer sum's tree (several devices or workers each sum a contiguous run).
    """

    def __init__(self, xp, block: int, start: int = 0):
        if block < 1 or block & (block - 1):
            raise ValueError(f"block={block} must be a power of two")
        if start % block or start < 0:
            raise ValueError(f"start={start} is not a multiple of block={block}")
        self.xp, self.block, self.level = xp, block, block.bit_length() - 1
        self.stack: list[tuple[int, int, object]] = []   # (level, index at that level, sum)
        self.start = start
        self.next = start                                  # first summand not yet covered

    def add(self, first: int, values, pos=None) -> None:
        if first % self.block or first < self.next or not 0 < values.shape[0] <= self.block:
            raise ValueError(f"a block of {values.shape[0]} summands from {first} is not aligned "
                             f"to blocks of {self.block} in increasing order")
        self.add_node(first, block_sum(values, self.xp) if pos is None else
                      tree_sum(pos, values, self.xp))

    def add_node(self, first: int, node, size: int | None = None) -> None:
        """The block's own pairwise sum ``node`` (None: no terms), computed by the caller;
        ``size``: the node of a smaller aligned power of two of summands, ``first ..
        first + size - 1`` (a subtree of a block: the same tree)."""
        size = self.block if size is None else size
        if size < 1 or size & (size - 1) or size > self.block or first % size or first < self.next:
            raise ValueError(f"a node of {size} summands from {first} is not an aligned power of "
                             f"two of at most {self.block}, in increasing order")
        self._absent(first)
        level = size.bit_length() - 1
        self._push(level, first >> level, node)
        self.next = first + size

    def skip_to(self, upto: int) -> None:
        """The summands up to ``upto`` not added are zero (absent): a run's end."""
        self._absent(upto)

    def merge(self, other: "PairwiseSum", move=lambda value: value) -> None:
        """Continue with the summands of ``other``, a sum that starts where this one ends
        (``move``: brings one of its nodes where this sum's are, e.g. to another device)."""
        if other.next == other.start:
            return                          # nothing summed there
        if other.start != self.next:
            raise ValueError(f"a sum from {other.start} cannot continue one that "
                             f"ends at {self.next}")
        for level, index, value in other.stack:
            self._push(level, index, None if value is None else move(value))
        self.next = other.next

    def _absent(self, upto: int) -> None:
        """Absent nodes for the summands next .. upto - 1 (all zero), in aligned runs."""
        while self.next < upto:
            # (after a node smaller than a block, the next aligned run may be smaller too)
            level = min(self.level, (self.next & -self.next).bit_length() - 1) if self.next \
                else self.level
            while self.next % (2 << level) == 0 and self.next + (2 << level) <= upto:
                level += 1
            self._push(level, self.next >> level, None)
            self.next += 1 << level

    def _push(self, level: int, index: int, value) -> None:
        """Add the node of summands index * 2**level .. + 2**level - 1, merging finished pairs."""
        while self.stack and self.stack[-1][:2] == (level, index - 1) and index % 2:
            value = _plus(self.stack.pop()[2], value)
            level, index = level + 1, index >> 1
        self.stack.append((level, index, value))

    def total(self):
        """The sum (None when every term was zero or nothing was added)."""
        if not self.stack:
            return None
        level, index, value = self.stack[-1]
        for left_level, left_index, left in reversed(self.stack[:-1]):
            # the right part has no partner up to the left node's level: it moves up unchanged
            index >>= left_level - level
            level = left_level
            assert index == left_index + 1
            value = _plus(left, value)
            level, index = level + 1, index >> 1
        return value


def row_sums(values, xp):
    """Pairwise tree sums of the rows of a 2-d array over its columns (``values`` is
    destroyed); the dot products of exact verification."""
    return block_sum(values.T, xp)


def sparse_row_sums(row, pos, val, nrows: int, xp):
    """The same tree sums for the stored values (row[q], pos[q], val[q]) of a sparse
    (nrows, n) array, sorted by (row, pos) without repeats: equal to :func:`row_sums` of the
    dense array (a missing value is a zero, and x + 0 = x), in O(stored values log n)."""
    out = xp.zeros(nrows, dtype=val.dtype)
    while row.size > 1:
        same_row = row[1:] == row[:-1]
        if not bool(same_row.any()):
            break
        pair = same_row & ((pos[1:] >> 1) == (pos[:-1] >> 1))   # siblings: 2i and 2i + 1
        first = xp.concatenate([pair, xp.zeros(1, dtype=bool)])
        second = xp.concatenate([xp.zeros(1, dtype=bool), pair])
        nxt = xp.concatenate([val[1:], xp.zeros(1, dtype=val.dtype)])
        val = xp.where(first, val + nxt, val)
        keep = ~second
        row, pos, val = row[keep], pos[keep] >> 1, val[keep]
    out[row] = val
    return out
