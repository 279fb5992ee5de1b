"""Table layout: E_t x D_t tables packed into one weight buffer, and the offsets that find them."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from typing import Optional, Sequence

import torch

from tbe import draws

INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class TableSpec:
    rows: int
    dim: int

    def __post_init__(self) -> None:
        for name in ("rows", "dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"TableSpec.{name} must be an int, got {v!r}")
        if self.rows < 1:
            raise ValueError(f"TableSpec.rows must be >= 1, got {self.rows}")
        if self.dim < 1:
            raise ValueError(f"TableSpec.dim (D) must be >= 1, got {self.dim}")


def parse_specs(embedding_specs: Sequence) -> tuple[TableSpec, ...]:
    """Accept [(E, D), ...] or TableSpec objects; ValueError names the offending table."""
    if isinstance(embedding_specs, (str, bytes)) or not hasattr(embedding_specs, "__iter__"):
        raise TypeError(f"embedding_specs must be a sequence of (E, D), got {embedding_specs!r}")
    specs = []
    for t, s in enumerate(embedding_specs):
        if isinstance(s, TableSpec):
            specs.append(s)
            continue
        try:
            rows, dim = s
        except (TypeError, ValueError):
            raise ValueError(f"embedding_specs[{t}] must be (E, D), got {s!r}") from None
        try:
            specs.append(TableSpec(rows, dim))
        except (TypeError, ValueError) as e:
            raise type(e)(f"embedding_specs[{t}]: {e}") from None
    if not specs:
        raise ValueError("embedding_specs must name at least one table, got []")
    return tuple(specs)


def check_feature_table_map(feature_table_map: Sequence, num_tables: int) -> tuple[int, ...]:
    """The map as a tuple, empty for the identity (one feature per table, in order: stored one way only). As
    FBGEMM's TBE, every entry names a table in [0, num_tables) and every table is read by at least one feature;
    ValueError names the bad value."""
    if isinstance(feature_table_map, (str, bytes)) or not hasattr(feature_table_map, "__iter__"):
        raise TypeError(f"feature_table_map must be a sequence of table ids, got {feature_table_map!r}")
    out = tuple(feature_table_map)
    for f, t in enumerate(out):
        if isinstance(t, bool) or not isinstance(t, int):
            raise TypeError(f"feature_table_map[{f}] must be an int table id, got {t!r}")
        if not 0 <= t < num_tables:
            raise ValueError(f"feature_table_map[{f}] = {t} is not a table id in [0, {num_tables})")
    unread = sorted(set(range(num_tables)) - set(out)) if out else []
    if unread:
        raise ValueError(f"feature_table_map={list(out)} reads no feature from table {unread[0]}; "
                         f"every table must be read by at least one feature")
    return () if out == tuple(range(num_tables)) else out


@dataclasses.dataclass(frozen=True)
class TableLayout:
    """Host-side offsets of a packed set of tables (all Python ints, cheap to hash and print), and the table
    each feature of a batch reads (``feature_table_map``; empty: feature t reads table t). Storage (weights,
    optimizer state, linear ids) is per table; the batch and the output columns are per feature."""

    specs: tuple[TableSpec, ...]
    feature_table_map: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "feature_table_map", check_feature_table_map(self.feature_table_map, len(self.specs)))

    @property
    def num_tables(self) -> int:
        return len(self.specs)

    @property
    def feature_tables(self) -> tuple[int, ...]:
        """The table of every feature (the map, or the identity when it is empty)."""
        return self.feature_table_map or tuple(range(self.num_tables))

    @property
    def num_features(self) -> int:
        """Features of a batch: offsets has num_features * B + 1 entries."""
        return len(self.feature_tables)

    @property
    def shared(self) -> bool:
        """Whether some table is read by more than one feature (a run may then span output columns)."""
        return self.num_features != self.num_tables

    @property
    def feature_dims(self) -> list[int]:
        return [self.specs[t].dim for t in self.feature_tables]

    @property
    def feature_rows(self) -> list[int]:
        return [self.specs[t].rows for t in self.feature_tables]

    @property
    def dims(self) -> list[int]:
        return [s.dim for s in self.specs]

    @property
    def rows(self) -> list[int]:
        return [s.rows for s in self.specs]

    @property
    def weights_offsets(self) -> list[int]:
        """Element offset of table t in the packed weight buffer."""
        out, acc = [], 0
        for s in self.specs:
            out.append(acc)
            acc += s.rows * s.dim
        return out

    @property
    def total_elements(self) -> int:
        return sum(s.rows * s.dim for s in self.specs)

    @property
    def col_offsets(self) -> list[int]:
        """Column offset of feature f in the pooled output [B, sum of the features' D]."""
        out, acc = [], 0
        for d in self.feature_dims:
            out.append(acc)
            acc += d
        return out

    @property
    def total_dim(self) -> int:
        """Width of the pooled output: every feature's D."""
        return sum(self.feature_dims)

    @property
    def max_dim(self) -> int:
        return max(self.dims)

    @property
    def hash_size_cumsum(self) -> list[int]:
        """T + 1 entries: the linear index of (t, id) is hash_size_cumsum[t] + id."""
        out, acc = [0], 0
        for s in self.specs:
            acc += s.rows
            out.append(acc)
        return out

    @property
    def total_rows(self) -> int:
        return self.hash_size_cumsum[-1]

    @property
    def fits_int32(self) -> bool:
        """Whether every linear index fits in int32 (the int32 linearization precondition)."""
        return self.total_rows - 1 <= INT32_MAX

    def device_tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The arrays kernels read, on ``device``, indexed by feature (the t of bag t*B + b): each feature's
        table's weights offset, D, rows and linear-id base (then the total rows), and its output column.
        Features of one table get one linear-id base, so their lookups of a row share one run."""
        i64 = dict(dtype=torch.int64, device=device)
        ft = self.feature_tables
        cs = self.hash_size_cumsum
        return {
            "weights_offsets": torch.tensor([self.weights_offsets[t] for t in ft], **i64),
            "dims": torch.tensor(self.feature_dims, **i64),
            "rows": torch.tensor(self.feature_rows, **i64),
            "col_offsets": torch.tensor(self.col_offsets, **i64),
            "hash_size_cumsum": torch.tensor([cs[t] for t in ft] + [cs[-1]], **i64),
        }


def check_batch_sizes(batch_size_per_feature: Sequence, num_features: int) -> tuple[int, ...]:
    """The per-feature batch sizes of a variable-batch (VBE) call as a tuple: one int >= 0 per feature, a
    single rank (FBGEMM's ``batch_size_per_feature_per_rank`` with one rank per feature, flattened); TypeError
    or ValueError names the field and the bad value."""
    name = "batch_size_per_feature"
    if isinstance(batch_size_per_feature, (str, bytes)) or not hasattr(batch_size_per_feature, "__iter__"):
        raise TypeError(f"{name} must be a sequence of ints, one per feature, got {batch_size_per_feature!r}")
    out = tuple(batch_size_per_feature)
    if len(out) != num_features:
        raise ValueError(f"{name} has {len(out)} entries, expected one per feature ({num_features})")
    for f, b in enumerate(out):
        if hasattr(b, "__iter__"):
            raise TypeError(f"{name}[{f}] = {b!r}: one batch size per feature (a single rank); batch sizes per "
                            f"feature per rank are not supported")
        if isinstance(b, bool) or not isinstance(b, int):
            raise TypeError(f"{name}[{f}] must be an int, got {b!r}")
        if b < 0:
            raise ValueError(f"{name}[{f}] = {b} is negative")
    return out


@dataclasses.dataclass(frozen=True)
class VariableBatch:
    """A variable-batch (VBE) call: feature f has ``sizes[f]`` bags. Bags are numbered feature by feature
    (feature f's bag b is bag ``bag_base[f] + b``, so offsets has sum B_f + 1 entries); the output is flat,
    FBGEMM's single-rank VBE layout: feature f's [B_f, D_f] block row-major at ``out_base[f]``."""

    sizes: tuple[int, ...]
    dims: tuple[int, ...]  # D of each feature

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", check_batch_sizes(self.sizes, len(self.dims)))

    @property
    def bag_base(self) -> list[int]:
        """F + 1 entries: the first bag of each feature, then the number of bags."""
        out = [0]
        for b in self.sizes:
            out.append(out[-1] + b)
        return out

    @property
    def out_base(self) -> list[int]:
        """F + 1 entries: the element offset of each feature's block in the flat output, then its size."""
        out = [0]
        for b, d in zip(self.sizes, self.dims):
            out.append(out[-1] + b * d)
        return out

    @property
    def num_bags(self) -> int:
        return sum(self.sizes)

    @property
    def max_batch(self) -> int:
        return max(self.sizes, default=0)

    @property
    def output_size(self) -> int:
        return self.out_base[-1]

    def locate(self, bag: int) -> tuple[int, int]:
        """(feature, sample) of bag number ``bag``."""
        base = self.bag_base
        f = max(0, bisect.bisect_right(base, bag, hi=len(self.sizes)) - 1)
        return f, bag - base[f]

    def device_tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """What the kernels read: per feature ``bag_base`` and ``out_base`` (int64, F + 1 entries), and per bag
        its feature ``bag_feature`` (int32) and the element offset of its output row ``bag_row`` (int64), built
        on ``device`` from the per-feature arrays (no host read of device data)."""
        i64 = dict(dtype=torch.int64, device=device)
        bag_base = torch.tensor(self.bag_base, **i64)
        out_base = torch.tensor(self.out_base, **i64)
        sizes = torch.tensor(self.sizes, **i64)
        feature = torch.repeat_interleave(torch.arange(len(self.sizes), **i64), sizes, output_size=self.num_bags)
        sample = torch.arange(self.num_bags, **i64) - bag_base[feature]
        row = out_base[feature] + sample * torch.tensor(self.dims, **i64)[feature]
        return {"bag_base": bag_base, "out_base": out_base, "bag_feature": feature.to(torch.int32), "bag_row": row}


def vector_width(element_bytes: int) -> int:
    """Elements of ``element_bytes`` bytes in one 16-byte access."""
    return max(1, 16 // element_bytes)


def row_vector(dims: Sequence[int], element_bytes: int, *row_strides: int) -> int:
    """``vector_width`` where every D (hence every row offset of the packed weights and every column
    offset of a [B, sum D] row) and each given row stride is a multiple of it, else 1: the kernels'
    ``VEC``, so each layout compiles one variant."""
    vec = vector_width(element_bytes)
    return vec if all(d % vec == 0 for d in dims) and all(s % vec == 0 for s in row_strides) else 1


def seeded_weights(layout: TableLayout, weights_dtype: torch.dtype, seed: int = 0,
                   device: Optional[torch.device | str] = None) -> torch.Tensor:
    """Packed initial weights: Uniform(-1/sqrt(E), 1/sqrt(E)) per table, drawn from ``seed`` in float64 and
    rounded to ``weights_dtype`` (what a fresh module holds), on ``device`` (the same values on each). A fresh
    tensor; the last one drawn is cached, since a check draws the same weights for the module and its reference."""
    dev = draws.device_or_cpu(device)
    if dev.type == "cuda" and dev.index is None:  # one cache key for "cuda" and the current "cuda:N"
        dev = torch.device("cuda", torch.cuda.current_device())
    return _seeded(tuple((s.rows, s.dim) for s in layout.specs), weights_dtype, seed, str(dev)).clone()


@functools.lru_cache(maxsize=1)
def _seeded(shapes: tuple[tuple[int, int], ...], weights_dtype: torch.dtype, seed: int, device: str) -> torch.Tensor:
    """Every table's values drawn as one float64 uniform draw (``tbe.draws.uniform``: torch's CPU stream from
    ``seed`` up to ``SMALL`` values, the device's counter-based one past it), each table's slice then scaled in
    place to (u * 2 - 1) * bound, without a temporary per operation (a 500k x 128 table is 512 MB each)."""
    g = torch.Generator().manual_seed(seed)
    out = draws.uniform(sum(rows * dim for rows, dim in shapes), g, torch.float64, device)
    at = 0
    for rows, dim in shapes:
        out[at:at + rows * dim].mul_(2).sub_(1).mul_(1.0 / math.sqrt(rows))
        at += rows * dim
    return out.to(weights_dtype)
