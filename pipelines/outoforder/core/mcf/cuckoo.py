"""A cuckoo filter with vectorised batch insert, lookup and delete (Fan et al., CoNEXT 2014).

Each key is hashed once (64 bits, :func:`xxh64` of the key's integer form) into a fingerprint of
``f`` bits (never 0: 0 marks an empty slot) and a first bucket ``i1``; its other bucket is
``i2 = i1 XOR (hash(fingerprint) mod B)``. Partial-key cuckoo hashing needs that alternate index
to be an *involution* (``alt(alt(i)) = i``), so a fingerprint moved by a kick can always find its
way back. XOR keeps that only when the bucket count ``B`` is a power of two: with another ``B``,
``i XOR h`` can leave ``[0, B)``, and wrapping it modulo ``B`` breaks the involution, which is how
some public implementations lose keys (false negatives) at capacities that are not powers of two.
Any requested capacity is therefore rounded *up* to a power-of-two bucket count.

A bucket holds ``b`` fingerprints. Insertion tries ``i1``, then ``i2``, then evicts a random
fingerprint of one of the two buckets and moves it to its alternate bucket, up to ``max_kicks``
times. Lookup answers "maybe present" when either bucket holds the fingerprint: no false
negatives, and a false-positive rate of about ``2b / 2^f`` (docs/mcf.md). Delete removes one copy
of the fingerprint, so a key inserted twice is present until deleted twice.

Batch operations work on whole numpy arrays: no Python loop per key. Insertion places keys
round by round (every bucket takes as many of the keys wanting it as it has free slots); the
keys left over after both buckets take part in vectorised kick rounds.

>>> f = CuckooFilter(capacity=1000, bucket_size=4, fingerprint_bits=12)
>>> f.insert(np.arange(500))
0
>>> bool(f.contains(np.arange(500)).all()), f.count
(True, 500)
>>> f.delete(np.arange(100)).sum(), f.count
(np.int64(100), 400)
>>> g = CuckooFilter.from_bytes(f.to_bytes())
>>> bool((g.contains(np.arange(1000)) == f.contains(np.arange(1000))).all())
True
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from outoforder.errors import ConfigError, StateError

U64 = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_MAGIC = b"OOOCF2\x00\x00"  # 2: xxh64 hashing (1 was splitmix64)
# magic, bucket size, fingerprint bits, max kicks, buckets, count, seed, stash entries
_HEADER = struct.Struct("<8sIIIQQIQ")


_P1, _P2, _P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_P4, _P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)
SPARK_SEED = 42  # the seed of Spark SQL's ``xxhash64``


def _rotl(x: U64, r: int) -> U64:
    return np.asarray((x << np.uint64(r)) | (x >> np.uint64(64 - r)), dtype=np.uint64)


def xxh64(x: npt.ArrayLike, seed: int = SPARK_SEED) -> U64:
    """XXH64 of each 64-bit integer's 8 bytes (vectorised), as Spark SQL's ``xxhash64`` of a long.

    The filters hash with it so that a Spark plan can locate a key in a filter with its own
    expressions (``xxhash64``, shifts, masks): no Python on the side that probes.

    >>> xxh64(np.array([0, 42])).view(np.int64).tolist()  # Spark: SELECT xxhash64(0L), xxhash64(42L)
    [-5252525462095825812, -6876166290308861218]
    """
    v = np.asarray(x).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h: U64 = np.full(v.shape, np.uint64(seed) + _P5 + np.uint64(8), dtype=np.uint64)
        h = h ^ (_rotl(v * _P2, 31) * _P1)
        h = _rotl(h, 27) * _P1 + _P4
        h = h ^ (h >> np.uint64(33))
        h = h * _P2
        h = h ^ (h >> np.uint64(29))
        h = h * _P3
        return np.asarray(h ^ (h >> np.uint64(32)), dtype=np.uint64)


def seed_mask(seed: int) -> np.uint64:
    """What a filter's seed XORs into a key before hashing (0 for seed 0)."""
    return np.uint64((seed * 0x2545F4914F6CDD1D) % (1 << 64))


def key_hashes(keys: npt.ArrayLike, seed: int = 0) -> U64:
    """64-bit hashes of integer keys (any integer dtype; floats are refused: hash their bits)."""
    arr = np.asarray(keys)
    if arr.dtype.kind not in "iub":
        msg = f"keys must be integers (got {arr.dtype}); hash other values to integers first"
        raise ConfigError(msg)
    with np.errstate(over="ignore"):
        return xxh64(arr.astype(np.int64).view(np.uint64).ravel() ^ seed_mask(seed))


def buckets_for(capacity: int, bucket_size: int, load: float = 0.95) -> int:
    """The power-of-two bucket count holding ``capacity`` keys at most ``load`` full."""
    need = max(1, math.ceil(capacity / (bucket_size * load)))
    return 1 << (need - 1).bit_length()


@dataclass
class CuckooFilter:
    """Fingerprints in a ``(buckets, bucket_size)`` table; 0 marks an empty slot."""

    capacity: int
    bucket_size: int = 4
    fingerprint_bits: int = 12
    max_kicks: int = 500
    seed: int = 0
    table: npt.NDArray[np.uint32] = field(init=False, repr=False)
    count: int = field(init=False, default=0)
    # the victim stash (Fan et al.'s victim cache, as a small array): fingerprints the kicks could
    # not rehome, with one of their buckets; lookups and deletes see them, so nothing is lost
    stash_fp: U64 = field(init=False, repr=False)
    stash_bucket: U64 = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.capacity < 1 or not 1 <= self.bucket_size <= 16 or not 2 <= self.fingerprint_bits <= 32:
            msg = (
                f"need capacity >= 1, 1 <= bucket_size <= 16 and 2 <= fingerprint_bits <= 32, got "
                f"{self.capacity}, {self.bucket_size}, {self.fingerprint_bits}"
            )
            raise ConfigError(msg)
        if self.max_kicks < 0:
            msg = f"max_kicks must be >= 0, got {self.max_kicks}"
            raise ConfigError(msg)
        n = buckets_for(self.capacity, self.bucket_size)
        self.table = np.zeros((n, self.bucket_size), dtype=np.uint32)
        self.stash_fp = np.zeros(0, dtype=np.uint64)
        self.stash_bucket = np.zeros(0, dtype=np.uint64)

    @property
    def buckets(self) -> int:
        """The bucket count (a power of two)."""
        return int(self.table.shape[0])

    @property
    def fpr_bound(self) -> float:
        """The analytic false-positive rate at full load, ``2b / 2^f``."""
        return float(2 * self.bucket_size / 2**self.fingerprint_bits)

    @property
    def bits_per_key(self) -> float:
        """Table bits per stored key (fingerprint bits × slots / keys)."""
        return float(self.table.size * self.fingerprint_bits / max(self.count, 1))

    def _locate(self, keys: npt.ArrayLike) -> tuple[U64, U64, U64]:
        """(fingerprint, i1, i2) per key."""
        h = key_hashes(keys, self.seed)
        mask = np.uint64(self.buckets - 1)
        fp = (h >> np.uint64(32)) % np.uint64(2**self.fingerprint_bits - 1) + np.uint64(1)
        i1 = h & mask
        return fp, i1, self._alt(i1, fp)

    def _alt(self, i: U64, fp: U64) -> U64:
        return i ^ (xxh64(fp) & np.uint64(self.buckets - 1))

    def _place(self, bucket: U64, fp: U64) -> tuple[BoolArray, IntArray, IntArray]:
        """Put as many fingerprints as fit into their bucket's free slots.

        Returns a mask of the placed ones and the (row, column) each went to.
        """
        placed = np.zeros(bucket.size, dtype=bool)
        none = np.zeros(0, dtype=np.int64)
        if bucket.size == 0:
            return placed, none, none
        b = bucket.astype(np.int64)
        order = np.argsort(b, kind="stable")
        sb = b[order]
        rank = np.arange(sb.size) - np.searchsorted(sb, sb, side="left")  # n-th key wanting the bucket
        used = (self.table[sb] != 0).sum(axis=1)
        ok = rank < self.bucket_size - used
        if not ok.any():
            return placed, none, none
        rows, ranks = sb[ok], rank[ok]
        free = self.table[rows] == 0
        cols = np.argmax(np.cumsum(free, axis=1) > ranks[:, None], axis=1).astype(np.int64)  # rank-th free
        self.table[rows, cols] = fp[order][ok].astype(np.uint32)
        placed[order[ok]] = True
        return placed, rows, cols

    @property
    def full(self) -> bool:
        """Whether a kick sequence failed: some fingerprints live in the stash."""
        return self.stash_fp.size > 0

    def insert(self, keys: npt.ArrayLike) -> int:
        """Insert every key; returns how many fingerprints ended in the stash (0 unless nearly full).

        Stashed fingerprints are still found by :meth:`contains` and :meth:`delete`: an insert
        never loses a key, but a filter that needs its stash is full and should be rebuilt larger.
        """
        fp, i1, i2 = self._locate(keys)
        ok, _, _ = self._place(i1, fp)
        rest = np.flatnonzero(~ok)
        ok2, _, _ = self._place(i2[rest], fp[rest])
        idx = rest[~ok2]
        self.count += int(fp.size - idx.size)
        if idx.size == 0:
            return 0
        rng = np.random.default_rng([self.seed, self.count, idx.size])
        return self._kick(fp[idx], i1[idx], i2[idx], rng)

    def _kick(self, fp: U64, i1: U64, i2: U64, rng: np.random.Generator) -> int:
        """Vectorised cuckoo eviction for keys whose two buckets are full; returns how many were stashed."""
        n = fp.size
        cur_fp, cur_b = fp, np.where(rng.random(n) < 0.5, i1, i2)
        for _ in range(self.max_kicks):
            if cur_fp.size == 0:
                break
            # one eviction per bucket per round; the others wait for the next round
            b = cur_b.astype(np.int64)
            go = np.zeros(b.size, dtype=bool)
            go[np.unique(b, return_index=True)[1]] = True
            rows = b[go]
            cols = rng.integers(0, self.bucket_size, rows.size)
            moved_fp = self.table[rows, cols].astype(np.uint64)
            self.table[rows, cols] = cur_fp[go].astype(np.uint32)
            moved_b = self._alt(rows.astype(np.uint64), moved_fp)
            placed, _, _ = self._place(moved_b, moved_fp)
            cur_fp = np.concatenate([cur_fp[~go], moved_fp[~placed]])
            cur_b = np.concatenate([cur_b[~go], moved_b[~placed]])
        self.stash_fp = np.concatenate([self.stash_fp, cur_fp])
        self.stash_bucket = np.concatenate([self.stash_bucket, cur_b])
        self.count += n
        return int(cur_fp.size)

    def _in_stash(self, fp: U64, i1: U64, i2: U64) -> BoolArray:
        if self.stash_fp.size == 0:
            return np.zeros(fp.size, dtype=bool)
        # a stashed (fingerprint, bucket) matches a key whose fingerprint agrees in either bucket
        hit = (self.stash_fp[None, :] == fp[:, None]) & (
            (self.stash_bucket[None, :] == i1[:, None]) | (self.stash_bucket[None, :] == i2[:, None])
        )
        return np.asarray(hit.any(axis=1))

    def contains(self, keys: npt.ArrayLike) -> BoolArray:
        """True where a key may be present (false positives possible, false negatives not)."""
        fp, i1, i2 = self._locate(keys)
        f = fp.astype(np.uint32)[:, None]
        in1 = (self.table[i1.astype(np.int64)] == f).any(axis=1)
        return np.asarray(
            in1 | (self.table[i2.astype(np.int64)] == f).any(axis=1) | self._in_stash(fp, i1, i2)
        )

    def delete(self, keys: npt.ArrayLike) -> BoolArray:
        """Remove one copy of each key's fingerprint; True where one was found and removed."""
        fp, i1, i2 = self._locate(keys)
        done = np.zeros(fp.size, dtype=bool)
        f = fp.astype(np.uint32)
        for bucket in (i1, i2):
            while True:
                todo = np.flatnonzero(~done)
                if todo.size == 0:
                    break
                rows = bucket[todo].astype(np.int64)
                hit = self.table[rows] == f[todo][:, None]
                has = hit.any(axis=1)
                if not has.any():
                    break
                todo, rows, hit = todo[has], rows[has], hit[has]
                col = np.argmax(hit, axis=1)
                # several keys may pick the same slot: one of them removes it per round
                slot = rows * self.bucket_size + col
                _, first = np.unique(slot, return_index=True)
                self.table[rows[first], col[first]] = 0
                done[todo[first]] = True
        for k in np.flatnonzero(~done & self._in_stash(fp, i1, i2)):  # the stash is tiny
            at = np.flatnonzero(
                (self.stash_fp == fp[k]) & ((self.stash_bucket == i1[k]) | (self.stash_bucket == i2[k]))
            )
            if at.size:
                self.stash_fp = np.delete(self.stash_fp, at[0])
                self.stash_bucket = np.delete(self.stash_bucket, at[0])
                done[k] = True
        self.count -= int(done.sum())
        return done

    def to_bytes(self) -> bytes:
        """Header and table, little-endian: a filter can be stored, broadcast and restored."""
        head = _HEADER.pack(
            _MAGIC,
            self.bucket_size,
            self.fingerprint_bits,
            self.max_kicks,
            self.buckets,
            self.count,
            self.seed,
            self.stash_fp.size,
        )
        stash = np.stack([self.stash_fp, self.stash_bucket]).astype("<u8").tobytes()
        return head + self.table.astype("<u4").tobytes() + stash

    @classmethod
    def from_bytes(cls, data: bytes) -> CuckooFilter:
        """The filter :meth:`to_bytes` wrote."""
        if len(data) < _HEADER.size:
            msg = f"not a cuckoo filter: {len(data)} bytes"
            raise StateError(msg)
        magic, b, fbits, kicks, n, count, seed, stashed = _HEADER.unpack_from(data)
        body = n * b * 4
        if magic != _MAGIC or len(data) != _HEADER.size + body + stashed * 16:
            msg = "not a cuckoo filter written by this version (bad magic or size)"
            raise StateError(msg)
        f = cls(capacity=1, bucket_size=b, fingerprint_bits=fbits, max_kicks=kicks, seed=seed)
        f.table = (
            np.frombuffer(data, dtype="<u4", count=n * b, offset=_HEADER.size).reshape(n, b).astype(np.uint32)
        )
        stash = np.frombuffer(data, dtype="<u8", offset=_HEADER.size + body).reshape(2, stashed)
        f.stash_fp, f.stash_bucket = stash[0].astype(np.uint64), stash[1].astype(np.uint64)
        f.count = count
        return f


@dataclass
class ShardedFilter:
    """Cuckoo filters over disjoint shards of the key space: key ``h`` lives in shard ``h mod n``.

    Each shard is built where its keys are (a task of the cluster), so no place ever holds every
    key; only the filters travel. ``h mod n`` is the floor modulo (Spark's ``pmod``), so negative
    hashes find the same shard on both sides.

    >>> shards = [CuckooFilter(8, fingerprint_bits=16) for _ in range(2)]
    >>> _ = shards[0].insert(np.array([4, -2])); _ = shards[1].insert(np.array([7]))
    >>> f = ShardedFilter.from_bytes(ShardedFilter(shards).to_bytes())
    >>> f.contains(np.array([4, -2, 7])).tolist()
    [True, True, True]
    """

    shards: list[CuckooFilter]

    def contains(self, keys: npt.ArrayLike) -> BoolArray:
        """True where a key may be present (no false negatives)."""
        k = np.asarray(keys, dtype=np.int64)
        shard = np.mod(k, len(self.shards))
        out = np.zeros(k.size, dtype=bool)
        for s in np.unique(shard):
            at = shard == s
            out[at] = self.shards[int(s)].contains(k[at])
        return out

    def to_bytes(self) -> bytes:
        """The shards' :meth:`CuckooFilter.to_bytes`, each after its length."""
        parts = [f.to_bytes() for f in self.shards]
        return b"".join(len(p).to_bytes(8, "little") + p for p in parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> ShardedFilter:
        """The filter :meth:`to_bytes` wrote."""
        shards, at = [], 0
        while at < len(data):
            n = int.from_bytes(data[at : at + 8], "little")
            shards.append(CuckooFilter.from_bytes(data[at + 8 : at + 8 + n]))
            at += 8 + n
        if not shards:
            msg = "not a sharded cuckoo filter: no shard"
            raise StateError(msg)
        return cls(shards)
