"""The adversarial case strategy the fuzz tests draw: a named KernelConfig plus a CaseSpec
whose shape (strategies.shapes) and hot-row segment lengths (strategies.segments) are drawn
at the config's edges, inside the backend's budget.

Bug classes: everything the parts target, in combination: tier routing and chunking at
exact SLs and in million-lookup runs, odd and wide D, empty and single bags, many tables,
hot rows at E - 1 and 0, every dtype mix, weighted and not, several training steps, large
learning rates (so an error in the accumulated gradient is not hidden by the weights' own
rounding), random-magnitude or exact-value data (``cases.dyadic``: one lost lookup of
a run of millions is a mismatch).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from hypothesis import strategies as st

from cases import VALUE_KINDS, CaseSpec, HotRow, multi_step_rate
from strategies.configs import NAMED, config_names, named_config
from strategies.segments import segment_lengths
from strategies.shapes import batch_shapes
from tbe import KernelConfig
from tbe.modes import FloatDtype


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """A spec and the name of the config (strategies.configs.NAMED) it runs under."""

    spec: CaseSpec
    config: str = "default"

    def kernel_config(self, faults: tuple[str, ...] = ()) -> KernelConfig:
        return named_config(self.config, faults)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "config": self.config}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FuzzCase":
        return cls(CaseSpec.from_dict(d["spec"]), d["config"])


@st.composite
def fuzz_cases(
    draw: st.DrawFn,
    max_lookups: int,
    max_runs: int,
    max_bags: Optional[int] = None,
    max_tables: int = 64,
    max_dim: int = 1024,
    max_total_dim: Optional[int] = None,
    configs: tuple[str, ...] = tuple(NAMED),
    weighted: Optional[bool] = None,
    max_steps: int = 2,
    segment_profile: Optional[str] = None,
    max_column_blocks: Optional[int] = None,
) -> FuzzCase:
    """A FuzzCase with at most ``max_lookups`` lookups, about ``max_runs`` background lookups
    (hot rows are few runs however long), at most ``max_bags`` bags; a long run's chunks cost
    like runs, so hot rows get at most ``max_runs`` chunks' worth of lookups. ``max_column_blocks``
    caps how many column blocks of the drawn config one row spans (rows wider than the widest
    bucket loop over it): an interpreter's cost per lookup grows with them, most under narrow buckets."""
    name = draw(config_names(configs))
    config = NAMED[name]
    if max_column_blocks is not None:
        max_dim = min(max_dim, max_column_blocks * max(config.dim_buckets))
    background = max(0, min(max_runs, max_lookups // 4))
    bags = max_bags if max_bags is not None else max(1, background)
    shape = draw(batch_shapes(max_lookups=background, max_bags=bags, max_tables=max_tables, max_dim=max_dim,
                                max_total_dim=max_total_dim))
    T, B = len(shape.tables), shape.batch_size
    hot: list[HotRow] = []
    if B > 0:
        taken: dict[int, set[int]] = {}
        hot_budget = min(max_lookups - T * B * shape.max_length, max_runs * config.chunk_size)
        for sl in draw(segment_lengths(config, hot_budget, segment_profile)):
            t = draw(st.integers(0, T - 1))
            rows = shape.tables[t][0]
            used = taken.setdefault(t, set())
            if rows - len(used) < 2:  # keep a row free for the table's ordinary ids
                continue
            row = draw(st.one_of(st.sampled_from([rows - 1, 0]), st.integers(0, rows - 1)))
            if row in used:
                continue
            used.add(row)
            hot.append(HotRow(t, row, sl))
    steps = draw(st.integers(1, max_steps)) if max_steps >= 1 else 0
    lr = draw(st.sampled_from([0.05, 0.5, 2.0]))
    lr = multi_step_rate(lr, max([h.count for h in hot] + [shape.max_length, 1]), steps)
    spec = CaseSpec(
        tables=shape.tables,
        batch_size=B,
        pooling=draw(st.sampled_from(["sum", "mean"])),
        weights_dtype=draw(st.sampled_from(FloatDtype)),
        output_dtype=draw(st.sampled_from(FloatDtype)),
        index_dtype=draw(st.sampled_from(["int64", "int32"])),
        weighted=draw(st.booleans()) if weighted is None else weighted,
        optimizer=draw(st.sampled_from(["exact_sgd", "exact_rowwise_adagrad"])),
        learning_rate=lr,
        length_profile=shape.length_profile,
        max_length=shape.max_length,
        hot_rows=tuple(hot),
        id_skew=draw(st.sampled_from([0.0, 1.1, 2.0])),
        steps=steps,
        seed=draw(st.integers(0, 2**31 - 1)),
        values=draw(st.sampled_from(list(VALUE_KINDS))),
    )
    return FuzzCase(spec, name)
