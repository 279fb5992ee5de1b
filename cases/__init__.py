"""The case: what a campaign draws, a SUT runs, an artifact saves and a replay feeds back, as typed records.

Three kinds share one small protocol (``CaseRecord``: ``kind``, ``spec``, ``bad``, ``subs``, ``size``,
``with_modes``, ``reseeded``, ``to_dict``; read back by ``case_from_dict``): a ``CaseSpec`` (a valid batch described by its shape, modes and
seed), a ``BadIdCase`` (a CaseSpec's module run on a ``BadBatchSpec``'s invalid batch) and a ``PackCase``
(several CaseSpecs as one step). ``tensors`` materializes any of them, deterministically, into the
``CaseTensors`` every check consumes. Below ``strategies`` (which draws cases) and above ``tbe`` only.
"""

from cases.bad import (BAG_POSITIONS, DIVERGENT_ID_KINDS, DIVERGENT_OFFSET_KINDS, ID_KINDS,
                       OFFSET_KINDS, BadBatch, BadBatchSpec, BadId, bag_index, materialize_bad)
from cases.batch import CaseTensors, initial_weights, tensors
from cases.drawn import Drawn, split_draw
from cases.dyadic import (D_GRID, EXACT_UNITS, PSW_GRID, VALUE_KINDS, W_GRID, dyadic_grads, dyadic_psw,
                          dyadic_weights, longest_accumulation, magnitudes)
from cases.kinds import AnyCase, BadIdCase, case_from_dict
from cases.pack import MODE_FIELDS, PackCase, assemble, packable, unify
from cases.protocol import CaseKind, CaseRecord
from cases.spec import LENGTH_PROFILES, Case, CaseSpec, HotRow, materialize, multi_step_rate, with_rate_and_steps

__all__ = [
    "AnyCase", "BAG_POSITIONS", "BadBatch", "BadBatchSpec", "BadId", "BadIdCase", "Case", "CaseKind", "CaseRecord",
    "CaseSpec", "CaseTensors",
    "D_GRID", "DIVERGENT_ID_KINDS", "Drawn", "DIVERGENT_OFFSET_KINDS", "EXACT_UNITS", "HotRow", "ID_KINDS",
    "LENGTH_PROFILES", "MODE_FIELDS", "OFFSET_KINDS", "PSW_GRID", "PackCase", "VALUE_KINDS", "W_GRID", "assemble",
    "bag_index", "case_from_dict", "dyadic_grads", "dyadic_psw",
    "dyadic_weights", "initial_weights", "longest_accumulation", "magnitudes", "materialize", "materialize_bad",
    "multi_step_rate", "packable", "split_draw", "tensors", "unify", "with_rate_and_steps",
]
