"""A Hypothesis-driven campaign: check generated cases under one config until a failure or the budget.

Hypothesis runs programmatically (a ``@given`` function with a directory database under
the artifacts dir, shrinking on) and climbs ``hypothesis.target`` on the normalized error
(error / bound), on the longest segment length and on coverage novelty (``fuzz.campaign.steer``).
The campaign stops at the first failure, after shrinking it, or when the time or example budget
is spent; a failure is saved whole as an artifact directory. Every case runs in a supervised worker
(``fuzz.execution.supervisor``): a crash, a CUDA error or a hang is a failure like a mismatch,
shrunk the same way (each candidate after a failure runs in a fresh worker).

Time (``fuzz.budgets``): an example runs only if its expected cost fits in the time left, and one still
running ``EXAMPLE_CAP_S`` past the end is stopped and counted as stopped for time, not judged. The shrink
time counts from the first failure, wherever it is found, so an early failure is answered early. Hypothesis
shrinks a failure for the first part of the shrink time (``HYPOTHESIS_SHARE``), then ``fuzz.campaign.reduce``
cuts tables, bags and lookups for the rest (all of it for a failure of the opening tour, which Hypothesis has
no choices of to shrink); both announce each step. A Ctrl-C (``fuzz.execution.interrupt``) ends the search
between examples, keeps the smallest failure so far and marks the result interrupted.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from hypothesis import HealthCheck, Phase, given, reject, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import HypothesisException, Unsatisfiable

from fuzz.campaign import fill as aim
from fuzz.campaign import steer
from fuzz.execution import artifacts, interrupt
from fuzz.budgets import EXAMPLE_CAP_S, Budget
from fuzz.campaign.reduce import failing_check, reduce_failure, size_text
from fuzz.campaign.pareto import without_pareto_front
from fuzz.campaign.repeat import Repeat
from fuzz.campaign.repeat import of as repeat_of
from cases import Drawn, split_draw, tensors
from fuzz.judge import CaseResult
from fuzz.status import StopReason
from strategies.space import campaign_cases
from fuzz.execution import CampaignStats
from fuzz.execution import expected_seconds, limits
from fuzz.errors import Unmaterializable
from fuzz.execution import CaseInterrupted, CaseTimedOut, Supervisor, leftover_pending, shared
from fuzz.sut import DEFAULT as DEFAULT_SUT
from fuzz.sut import get as get_sut
from fuzz.sut import fit_case, fit_strategy
from strategies.tour import ALL, TourShare, size_edges, tour
from oracles.error_model import WORST, ErrorModel, from_env
from tbe import KernelConfig


HYPOTHESIS_SHARE = 0.5  # of the shrink time, for Hypothesis's shrinker; the spec reducer gets the rest
RESUME_S = 2.0  # time left after the aimed cases for which the drawn search goes on
AIM_BUILD_LEAD = 2.0  # while a warm-up builds, the aimed cases' kernels start building this many of their shares
# of time before they run: on a fresh machine the warm-up reaches the rarer modes only after a quick campaign


class _OutOfTime(BaseException):
    """Raised inside the property to end Hypothesis's run when the budget is spent (not a failure)."""


class _Interrupted(BaseException):
    """Raised inside the property to end Hypothesis's run after a Ctrl-C (``fuzz.execution.interrupt``)."""


class _TourFailed(BaseException):
    """Raised inside the property when a postponed opening-tour case run between draws fails (``best`` holds it):
    Hypothesis must not shrink the draw it interrupted."""


class _CaseFailed(AssertionError):
    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.text())
        self.result = result


@dataclasses.dataclass
class CampaignResult(CampaignStats):
    """A campaign's statistics (``fuzz.execution.stats``) and how it ended."""

    config: KernelConfig
    budget: Budget
    seed: int
    failure: Optional[CaseResult] = None
    first_failure_examples: Optional[int] = None
    first_failure_seconds: Optional[float] = None
    first_failure_headline: Optional[str] = None  # how it failed before shrinking (a crash may shrink to a mismatch)
    shrink_seconds: Optional[float] = None  # from the first failure to the end of shrinking
    artifact: Optional[Path] = None
    stopped_by: StopReason | str = ""  # "" while running
    model: ErrorModel = WORST         # the accumulation bound the checks used
    sut: str = DEFAULT_SUT            # the system under test (fuzz.sut.protocol registry name)
    known: list[Any] = dataclasses.field(default_factory=list)  # fuzz.campaign.triage.KnownRecord, one per finding
    failure_config: Optional[KernelConfig] = None    # the failing case's effective config (drawn overrides applied)
    failure_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    environment: Optional[dict[str, Any]] = None     # where the cases ran (the supervised worker's)
    search_config: bool = True        # the search drew configs around ``config`` (coverage's reachable cells)
    resumed: bool = False             # the draws went on after the aimed cases, from seed + 1
    drawn_after: int = 0              # drawn examples checked after the aimed cases (``resumed``)
    reused: bool = False              # the search first ran examples saved in the example database
    skipped_at: list[int] = dataclasses.field(default_factory=list)  # attempts not started or stopped, for time
    stopped: list[tuple[Any, KernelConfig, CaseTimedOut]] = dataclasses.field(default_factory=list)  # cut for time
    stopped_artifacts: list[Path] = dataclasses.field(default_factory=list)  # where ``stopped`` was saved

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def interrupted(self) -> bool:
        return self.stopped_by == StopReason.INTERRUPTED

    @property
    def judged(self) -> bool:
        """False when no example was checked (all out of time): not a pass, the campaign did not run."""
        return self.examples > 0

    @property
    def tour(self) -> Optional[TourShare]:
        """The share of the opening tour this campaign ran, every round the same (None: the search alone)."""
        return self.tour_shares[0] if self.tour_shares else None

    def count(self, result: CaseResult, known: bool, triaged: bool, observe: Any) -> None:
        """A checked example of the search or the tour (not a shrink step); ``known``: a failure the
        triage list explains. Triaged runs keep the ratios of passing cases only."""
        self.record(result, ratios=not triaged or result.ok)
        self.expected_failures += known
        if observe is not None:
            observe(self, result)

    def first_failed(self, result: CaseResult, start: float) -> None:
        self.first_failure_examples = self.examples
        self.first_failure_seconds = time.perf_counter() - start
        self.first_failure_headline = result.headline

    def unmaterialized(self, error: Exception, case: Any) -> None:
        self.unmaterializable += 1
        self.unmaterializable_example = self.unmaterializable_example or f"{error}: {case}"


def _explained(result: CaseResult, expected: Any) -> bool:
    """A failure that ``expected`` (the triage list's predicate, if any) explains."""
    return not result.ok and expected is not None and bool(expected(result))


def _database(root: Path, config: KernelConfig, sut: str = DEFAULT_SUT) -> DirectoryBasedExampleDatabase:
    """One example database per config (and SUT), so a fault's failures are not replayed against another."""
    import hashlib

    key = hashlib.sha1((config.to_json() + ("" if sut == DEFAULT_SUT else sut)).encode()).hexdigest()[:12]
    return DirectoryBasedExampleDatabase(str(Path(root) / ".hypothesis" / key))


def opening_cases(config: KernelConfig, budget: Budget, sut: str = DEFAULT_SUT) -> list[Drawn]:
    """The opening tour for ``sut``: this project's tour (``strategies.tour``) for its kernels; for another SUT the
    tour's cases as they are (its overrides name this project's paths), the size edges and the SUT's own opening
    cases (``SUT.tour``), each under one of its override profiles in turn where it has its own."""
    target = get_sut(sut)
    cases = tour(config, budget.max_lookups)
    if target.capabilities.project_kernels:
        return cases
    plain = [d.case for d in cases] + size_edges(budget.max_lookups)
    plain += list(target.tour(budget.max_lookups)) if target.tour is not None else []
    own = target.capabilities.config_profiles if target.capabilities.kernel_config else None
    profiles = [()] + [tuple(sorted(dict(ov).items())) for _, ov in own or ()]
    return [Drawn(c, profiles[i % len(profiles)]) for i, c in enumerate(plain)]


@dataclasses.dataclass
class CampaignOptions:
    """How a campaign runs, beside its config, budget and seed.

    ``artifacts_dir=None`` saves nothing; the example database lives under it unless ``use_database`` is off;
    ``database`` (a Hypothesis ExampleDatabase, e.g. Redis-backed) replaces the directory database, which is
    written, and read (its saved examples run first) only with ``reuse``, so a seed decides the examples.
    ``strategy`` replaces the drawn cases (default: the config-space search within the SUT's capabilities);
    ``shrink`` shrinks a failure. ``progress`` (a callable taking a line) receives occasional status lines;
    ``announce`` (default ``progress``) the lines a person watches for even under a live bar: the first failure
    and each shrinking step. ``observe(res, result)`` sees every checked example. ``model`` picks the
    accumulation bound (default ``$TBE_FUZZ_BOUND``, else worst case). ``supervisor`` runs the cases (default:
    this process's shared one). ``sut`` names the system under test. A failing case for which
    ``expected(result)`` is truthy (already triaged) counts as a pass (``fuzz.campaign.triage`` drives that).
    ``readiness`` (``fuzz.compile.background.Readiness``) defers cases whose kernels a background warm-up has not
    built yet. ``tour_share`` picks the opening tour's cases (``strategies.tour.TourShare``; None: the search
    alone); ``tour_done``: how many of them an earlier round already ran, in order. ``fill``: when the campaign
    draws its own cases and its time bounds the draws, the last ``fuzz.campaign.fill.FILL_SHARE`` of the search
    time runs aimed cases for the coverage cells the draws left at zero. ``repeat`` (``fuzz.campaign.repeat``)
    runs another campaign's examples again by their counts per phase; its budget should have no time bound.
    """

    artifacts_dir: Optional[Path] = artifacts.DEFAULT_DIR
    strategy: Any = None
    shrink: bool = True
    meta: Optional[dict[str, Any]] = None
    progress: Any = None
    use_database: bool = True
    database: Any = None
    observe: Any = None
    model: Optional[ErrorModel] = None
    supervisor: Optional[Supervisor] = None
    sut: str = DEFAULT_SUT
    expected: Optional[Callable[[CaseResult], Any]] = None
    readiness: Any = None
    announce: Any = None
    tour_share: Optional[TourShare] = ALL
    fill: bool = True
    tour_done: int = 0
    reuse: bool = False
    repeat: Optional[Repeat] = None


class CampaignRunner:
    """Search for a case that fails under ``config``, one method per phase, in the order ``run`` calls them:
    the opening tour, the draws (Hypothesis; it shrinks what it finds), the tour cases a background build
    postponed, the aimed cases for the coverage cells left at zero and the draws resumed after them, the
    reducer, and the saving of what failed or was cut for time. ``CampaignResult.stopped_by`` says why it ended."""

    def __init__(self, config: KernelConfig, budget: Budget, seed: int = 0,
                 options: Optional[CampaignOptions] = None) -> None:
        o = options or CampaignOptions()
        self.config, self.budget, self.seed, self.o = config, budget, seed, o
        self.model = o.model or from_env()
        self.res = res = CampaignResult(config, budget, seed, model=self.model, sut=o.sut,
                                        search_config=o.strategy is None)
        self.sup = o.supervisor or shared()
        self.pending = None if o.artifacts_dir is None else Path(o.artifacts_dir) / ".pending"
        res.leftover = leftover_pending(self.pending) if self.pending is not None else []
        self.caps = caps = get_sut(o.sut).capabilities
        size = limits(o.sut)
        self.opening: list = []
        self.fill_on = o.fill and o.strategy is None and caps.kernel_config and caps.project_kernels
        self.strategy = o.strategy
        if o.strategy is None:  # the config-space search needs a SUT that takes a KernelConfig
            self.strategy = fit_strategy(campaign_cases(
                config, budget.max_lookups, search_config=caps.kernel_config,
                max_column_blocks=size.max_column_blocks, pack=budget.pack, max_chunks=size.max_chunks,
                max_work=size.max_work, profiles=caps.config_profiles, shared_tables=caps.feature_table_map,
                vbe=caps.vbe), caps)
            if o.tour_share is not None:
                res.tour_shares = (o.tour_share,)
                self.opening = [d for d in (fit_case(d, caps) for d in o.tour_share.pick(
                    opening_cases(config, budget, o.sut))) if d is not None][o.tour_done:]
        self.announce = o.announce or o.progress
        self.start = time.perf_counter()
        self.search_end = self.start + budget.seconds
        self.reserve = aim.FILL_SHARE * budget.seconds if self.fill_on else 0.0  # the aimed cases' time
        self.best: list[CaseResult] = []  # smallest failure seen, in case shrinking runs out of time
        self.steps = 0  # shrink steps so far (Hypothesis's, then the reducer's)
        self.configs: dict[int, tuple[KernelConfig, dict[str, Any]]] = {}  # id(failing result) -> config, overrides
        self.phases = ([Phase.explicit] + ([Phase.reuse] if o.reuse else []) + [Phase.generate, Phase.target]
                       + ([Phase.shrink] if o.shrink else []))
        db = _database(o.artifacts_dir, config, o.sut) if o.artifacts_dir is not None and o.use_database else None
        if o.database is not None and o.use_database:
            db = o.database
        self.db = db
        res.reused = o.reuse and db is not None
        self.attempts = 0  # cases tried before a failure (tour, draws, aimed): a repeat leaves out the same ones
        self.later: list = []  # tour cases postponed until their kernels are built
        self.built_first: Any = None  # the readiness of the aimed cases built ahead of the warm-up, once they are
        self.first_at = (self.search_end - (1 + AIM_BUILD_LEAD) * self.reserve
                         if self.fill_on and self.reserve and o.readiness is not None
                         and not o.readiness.finished else None)  # when their build starts

    # ------------------------------------------------------------------ the phases
    def run(self) -> CampaignResult:
        """The whole campaign: every phase in order; what it found, shrunk and saved."""
        if not self.tour():
            self.draws(self.seed)
            self.postponed()
            self.fill()
        self.settle()
        self.reduce()
        self.save()
        return self.res

    def tour(self) -> bool:
        """The opening tour (``strategies.tour``) first; True when it failed (the search then does not run, and,
        Hypothesis having no choice sequence of it to shrink, the spec reducer alone shrinks it). While a background
        build is under way, a tour case whose kernels are not built yet is postponed: it runs between draws as
        soon as they are, so the draws need not wait for the tour's slowest group."""
        readiness = self.o.readiness
        postpone = self.later if readiness is not None and not readiness.finished else None
        if self._explicit(self.opening, True, lambda: self.start + self.budget.seconds, readiness, postpone):
            self.search_end = time.perf_counter()
            self.res.stopped_by = StopReason.FAILURE
            self.res.failure = self.best[0]
            return True
        return False

    def draws(self, seed: int) -> None:
        """Hypothesis's search from ``seed`` until a failure (shrunk), the time, or the examples run out."""
        res = self.res
        try:
            if not self.best and not res.interrupted:
                with without_pareto_front(self.budget.pack > 1):  # Hypothesis's front: a fifth of a packed search
                    _until_satisfiable(self._hypothesis_run(seed), self.o.readiness,
                                       lambda: self.search_end - self.reserve)
            if not res.stopped_by:
                res.stopped_by = StopReason.EXAMPLES
        except _TourFailed:
            self.search_end = time.perf_counter()  # as for a failure in the tour: the reducer gets the shrink time
            res.failure, res.stopped_by = self.best[0], StopReason.FAILURE
        except _CaseFailed as e:
            res.failure = e.result
            res.stopped_by = StopReason.FAILURE
        except (_OutOfTime, _Interrupted):
            if self.best:
                res.failure = self.best[0]
                res.stopped_by = StopReason.INTERRUPTED if res.interrupted else StopReason.FAILURE
        except (HypothesisException, AssertionError):  # e.g. Flaky: a failure that did not reproduce
            if not self.best and not res.skipped_for_time:
                raise
            res.failure = self.best[0] if self.best else None  # Unsatisfiable: every draw was too big for the time
            res.stopped_by = StopReason.FAILURE if self.best else StopReason.TIME

    def postponed(self) -> None:
        """Tour cases still postponed when the draws ended: they run now."""
        res = self.res
        if self.later and not self.best and not res.interrupted:
            stopped_by = res.stopped_by
            if self._explicit(self.later, True, self.hard_end, self.o.readiness):
                self.search_end = time.perf_counter()
                res.failure, res.stopped_by = self.best[0], StopReason.FAILURE
            elif not res.interrupted:
                res.stopped_by = stopped_by

    def fill(self) -> None:
        """The aimed cases for the coverage cells the draws left at zero, in the time kept for them; if they end
        early, the draws resume from a seed of their own."""
        res, repeat = self.res, self.o.repeat
        timed_out = res.stopped_by == StopReason.TIME  # not after --max-examples, unless repeated
        if not (self.fill_on and not self.best and res.failure is None
                and (timed_out if repeat is None else repeat.aimed > 0)):
            return
        share = self.o.tour_share or ALL
        aimed = _aimed(res, self.config, share, self.search_end, self.caps)[:None if repeat is None else repeat.aimed]
        building = self.built_first if self.built_first is not None else self.o.readiness
        if self._explicit(_as_ready(aimed, building, self.config, lambda: self.search_end), False,
                          lambda: self.search_end):
            res.failure, res.stopped_by = self.best[0], StopReason.FAILURE
        elif (res.stopped_by == StopReason.TIME and self.search_end - time.perf_counter() > RESUME_S
              if repeat is None else repeat.after > 0 and not res.interrupted):
            self.resume()

    def resume(self) -> None:
        """The draws again after the aimed cases, from ``seed + 1``, with the rest of the search time."""
        self.reserve = 0.0
        self.res.stopped_by, self.res.resumed = "", True
        self.draws(self.seed + 1)

    def settle(self) -> None:
        """The smallest failure seen is the campaign's, with the config it failed under and the worker's
        environment."""
        res, best = self.res, self.best
        if best and (res.failure is None or best[0].case.size() < res.failure.case.size()):
            res.failure, res.stopped_by = best[0], StopReason.INTERRUPTED if res.interrupted else StopReason.FAILURE
        res.environment = self.sup.environment
        if res.failure is not None:
            res.failure_config, res.failure_overrides = self.configs.get(id(res.failure), (self.config, {}))

    def reduce(self) -> None:
        """Spec-level reduction of the failure (``fuzz.campaign.reduce``) until the shrink time ends."""
        res = self.res
        if res.failure is not None and self.o.shrink and not res.interrupted:
            _reduce(res, self._run, self.shrink_end, self.announce, self.steps)

    def save(self) -> None:
        """The failure, whole, and every case cut for time, under the artifacts directory."""
        res, root = self.res, self.o.artifacts_dir
        res.seconds = time.perf_counter() - self.start
        if res.failure is not None and res.first_failure_seconds is not None:
            res.shrink_seconds = res.seconds - res.first_failure_seconds
        if res.failure is not None and root is not None:
            res.artifact = save_campaign_failure(root, res, self.o.meta)
        if root is not None:
            res.stopped_artifacts = [save_stopped(root, res, *s, self.o.meta) for s in res.stopped]

    # ------------------------------------------------------------------ time
    def shrink_end(self) -> float:
        """The end of shrinking (the search's end moves earlier at the first failure)."""
        return self.search_end + self.budget.shrink_seconds

    def hard_end(self) -> float:
        """No example runs past this."""
        return (self.shrink_end() if self.best else self.search_end) + EXAMPLE_CAP_S

    # ------------------------------------------------------------------ one case
    def _drawn_here(self) -> int:
        """Drawn examples checked in this phase of the draws (before or after the aimed)."""
        counts = repeat_of(self.res)
        return counts.after if self.res.resumed else counts.drawn

    def _run(self, case: Any, cfg: KernelConfig) -> CaseResult:
        """One supervised case, its round trip and phases counted."""
        res, repeat = self.res, self.o.repeat
        t0 = time.perf_counter()
        left = self.hard_end() - t0
        attempt = self.attempts
        self.attempts += 0 if self.best else 1
        expected = expected_seconds(case, sut=self.o.sut)
        if (expected > left) if repeat is None or self.best else attempt in repeat.skipped:
            res.skipped_for_time += 1
            res.skipped_at += [] if self.best else [attempt]
            raise CaseTimedOut(f"expected to take {expected:.0f}s with {left:.0f}s left"
                               if repeat is None or self.best
                               else f"left out for time by the campaign repeated (attempt {attempt})")
        try:
            result = self.sup.run(case, cfg, pending=self.pending, model=self.model, sut=self.o.sut, limit_s=left)
        except CaseTimedOut as e:
            res.stopped_for_time += 1
            res.skipped_at += [] if self.best else [attempt]
            if not self.best:  # a shrink step cut for time is only a smaller copy of the failure already kept
                res.stopped.append((case, cfg, e))
            raise
        res.time.add(result.phases, time.perf_counter() - t0)
        if self.o.readiness is not None:
            self.o.readiness.checked()
        return result

    def _found(self, result: CaseResult) -> None:
        """The first failure: say so; shrinking starts, and its time counts from here, not the search's end."""
        self.search_end = min(self.search_end, time.perf_counter())
        self.res.first_failed(result, self.start)
        if self.announce is not None:
            check = failing_check(result)
            self.announce(f"failure at example {self.res.examples} ({result.kind}" + (f", {check}" if check else "")
                          + f"); shrinking: now {size_text(result)}")

    def _hypothesis_run(self, seed_value: int) -> Callable[[], None]:
        # settings outermost: @seed alone would switch the example database off (Hypothesis does so
        # for seeded runs), and a campaign needs both its seed and its (shared) database
        return settings(
            max_examples=self.budget.max_examples, database=self.db, phases=self.phases, deadline=None,
            derandomize=False, suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False,
        )(hypothesis_seed(seed_value)(given(self.strategy)(self._property())))

    def _property(self) -> Callable[[Any], None]:
        def draw_and_check(drawn: Any) -> None:
            self._draw_and_check(drawn)
        return draw_and_check

    def _draw_and_check(self, drawn: Any) -> None:
        """Hypothesis's property: one drawn example, checked; a failure the triage list does not explain fails it."""
        res, o, config, best = self.res, self.o, self.config, self.best
        case, cfg, overrides = split_draw(drawn, config)  # config-space search: overrides drawn around config
        if interrupt.requested():
            res.stopped_by = StopReason.INTERRUPTED
            raise _Interrupted()
        if o.repeat is not None and not best and self._drawn_here() >= (
                o.repeat.after if res.resumed else o.repeat.drawn):
            res.stopped_by = StopReason.EXAMPLES
            raise _OutOfTime()
        now = time.perf_counter()
        if res.failure is None and not best and now > self.search_end - self.reserve:
            res.stopped_by = StopReason.TIME
            raise _OutOfTime()
        if best and now > self.search_end + self.budget.shrink_seconds * (HYPOTHESIS_SHARE if o.shrink else 1.0):
            raise _OutOfTime()
        if self.first_at is not None and now > self.first_at and not best:  # the aimed cases' kernels build now
            self.first_at = None
            try:
                self.built_first = _build_aimed_first(res, config, o.tour_share or ALL, self.search_end,
                                                      o.readiness, self.caps)
            except Exception as e:  # noqa: BLE001  (the harness's, never this draw's failure: said, not judged)
                if self.announce is not None:
                    self.announce(f"  aimed cases: their kernels could not be built ahead ({type(e).__name__}: {e}); "
                                  f"they wait for the warm-up")
        if self.later and not best and self._explicit(_take_ready(self.later, o.readiness, config), True,
                                                      self.hard_end):
            raise _TourFailed()
        if o.readiness is not None and not best:
            now_run = o.readiness.admit_or_steer(case, cfg, config)
            if now_run is None:
                reject()
            if now_run[1] is not cfg:  # steered to the config under test: the drawn overrides are dropped
                overrides = {}
            case, cfg = now_run
        try:
            result = self._run(case, cfg)
        except Unmaterializable as e:
            res.unmaterialized(e, case)
            reject()
        except CaseTimedOut:
            if time.perf_counter() < (self.search_end if not best else self.shrink_end()):
                reject()  # too big for the time left: a smaller draw may fit
            if not best:
                res.stopped_by = StopReason.TIME
            raise _OutOfTime()
        except CaseInterrupted:
            res.stopped_by = StopReason.INTERRUPTED
            raise _Interrupted()
        known = _explained(result, o.expected)
        target(0.0 if known else min(result.max_ratio, 1e12), label="error / bound")
        target(float(result.max_segment), label="longest segment")
        target(steer.novelty(res.coverage, result.cells), label=steer.LABEL)
        if best:
            res.shrink_examples += 1
            self.steps += 1
        else:
            res.count(result, known, o.expected is not None, o.observe)
            res.drawn_after += res.resumed
        if not result.ok and not known:
            if not best:
                self._found(result)
            self.configs[id(result)] = (cfg, overrides)
            if not best or result.case.size() <= best[0].case.size():
                smaller = bool(best) and result.case.size() < best[0].case.size()
                best[:] = [result]
                if smaller and self.announce is not None:
                    self.announce(f"  shrinking: step {self.steps}, now {size_text(result)}")
            raise _CaseFailed(result)
        if o.progress is not None and res.examples % 10 == 0:
            o.progress(f"  {res.examples} examples, {res.lookups} lookups, {time.perf_counter() - self.start:.0f}s")

    def _explicit(self, cases: Iterable[Any], tour: bool, end: Callable[[], float], readiness: Any = None,
                  postpone: Optional[list] = None) -> bool:
        """Fixed cases in order (see ``_explicit``): True (and the failure kept) at the first unexplained one."""
        return _explicit(cases, tour, self.config, self.res, self.best, self.configs, end, self.o.observe,
                         self._run, self.o.expected, self._found, readiness, postpone)


STOPPED_DIR = "stopped"  # under the artifacts directory: cases cut for time, not judged (no failure listing sees them)


def save_stopped(root: Path, res: CampaignResult, case: Any, config: KernelConfig, cut: CaseTimedOut,
                 meta: Optional[dict[str, Any]] = None) -> Path:
    """Save a case the budget's end cut before it was judged, whole, under ``root/stopped``: it may hang (it had not
    reached its own timeout) or just be slow, and only a replay, which waits out its timeout, says which."""
    text = (f"not judged: {cut}; a campaign waits {EXAMPLE_CAP_S:g}s past its search's end at most. "
            f"Replay it to judge it.")
    return artifacts.save_failure(Path(root) / STOPPED_DIR, case, config, tensors(case), text, {
        "source": "campaign", "stopped_for_time": True, "seconds_ran": cut.seconds, "own_timeout": cut.timeout,
        "budget": res.budget.name, "seed": res.seed, "sut": res.sut, "config_under_test": res.config.to_dict(),
        **(meta or {}),
    }, res.environment)


def save_campaign_failure(root: Path, res: CampaignResult, meta: Optional[dict[str, Any]] = None) -> Path:
    """Save ``res``'s failure under ``root`` with the config it failed under and the environment it ran in;
    ``meta`` adds to (or replaces) the campaign's own fields."""
    return artifacts.save_result(root, res.failure, res.failure_config or res.config, {
        "source": "campaign", "budget": res.budget.name, "seed": res.seed, "sut": res.sut,
        "examples_before_failure": res.first_failure_examples, "bound": res.model.kind, **(meta or {}),
        "config_overrides": res.failure_overrides, "config_under_test": res.config.to_dict(),
    }, res.environment)


def _reduce(res: CampaignResult, run: Any, shrink_end: Any, announce: Any, steps: int) -> None:
    """Spec-level reduction of ``res.failure`` (``fuzz.campaign.reduce``) until the shrink time ends."""
    cfg = res.failure_config or res.config

    def check(case):
        try:
            return run(case, cfg)
        except (Unmaterializable, CaseTimedOut):
            return None

    def stop() -> bool:
        return interrupt.requested() or time.perf_counter() > shrink_end()

    try:
        red = reduce_failure(res.failure, check, stop, announce, first_step=steps)
    except CaseInterrupted:
        res.stopped_by = StopReason.INTERRUPTED
        return
    res.reduce_steps = red.tried
    res.failure = red.result
    if interrupt.requested():
        res.stopped_by = StopReason.INTERRUPTED


def _until_satisfiable(prop: Any, readiness: Any, end: Any) -> None:
    """Run ``prop``; while a background build is under way, a run that Hypothesis ended because every draw was
    deferred (``Unsatisfiable``) starts again once more kernels are built, until the search time is over."""
    while True:
        try:
            return prop()
        except Unsatisfiable:
            if readiness is None or readiness.finished or time.perf_counter() >= end():
                raise
            readiness.wait_for_news(min(5.0, max(0.0, end() - time.perf_counter())))


def _aimed(res: CampaignResult, config: KernelConfig, share: TourShare, end: float, caps: Any) -> list:
    """Aimed cases (``fuzz.campaign.fill``) for the reachable cells of ``share`` still at zero, fitted to the SUT's
    capabilities; the cells are split among a run's workers as the tour is, so each is aimed at once."""
    zero, planned = _plan_aimed(res, config, share, end, caps)
    res.fill_zero, res.fill_planned = len(zero), len(planned)
    return planned


def _as_ready(cases: list, readiness: Any, config: KernelConfig, end: Callable[[], float]) -> Iterator[Any]:
    """``cases`` in the order their kernels are built: those built now first (order kept), then each as its group
    finishes (by the warm-up, or ahead of it: ``Readiness.build_first``). A case still unbuilt at ``end()`` is
    left out: run, it would compile in the worker past the search's end. Without a build, all of them in order."""
    if readiness is None:
        yield from cases
        return
    pending = list(cases)
    while pending and time.perf_counter() < end():
        ready = _take_ready(pending, readiness, config)
        yield from ready
        if pending and not ready:
            readiness.wait_for_news(min(1.0, max(0.0, end() - time.perf_counter())))


def _plan_aimed(res: CampaignResult, config: KernelConfig, share: TourShare, end: float,
                caps: Any) -> tuple[list, list]:
    """The cells of ``share`` at zero now, and the aimed cases planned for them."""
    from fuzz.judge import coverage

    reachable = sorted(coverage.reachable(config, res.search_config, max_lookups=res.budget.max_lookups,
                                          feature_map=caps.feature_table_map, vbe=caps.vbe),
                       key=coverage.cell_order)
    zero = [c for c in share.pick(reachable) if not res.coverage.counts[c]]
    # loop cells are aimed at where the checks observe them (a stand-in SUT or supervisor that runs no kernel does not)
    loops = any(n and c[1].group == coverage.EdgeGroup.LOOP for c, n in res.coverage.counts.items())
    planned = [d for d in (fit_case(d, caps) for _, d in aim.plan(zero, config, res.budget.max_lookups, deadline=end,
                                                                  loops=loops)) if d is not None]
    return zero, planned


def _build_aimed_first(res: CampaignResult, config: KernelConfig, share: TourShare, end: float, readiness: Any,
                       caps: Any) -> Any:
    """Start building, ahead of the warm-up's groups, the kernels of the aimed cases the cells at zero now would
    get whose kernels are not built yet (``Readiness.build_first``); their readiness, or None. A cell the draws
    reach meanwhile leaves its case built but unused; the aimed cases of one cell are the same whenever planned."""
    _, planned = _plan_aimed(res, config, share, end, caps)
    pairs = [split_draw(d, config)[:2] for d in planned]
    return readiness.build_first([p for p in pairs if not readiness.ready(*p)])


def _take_ready(later: list, readiness: Any, config: KernelConfig) -> list:
    """The postponed tour cases whose kernels are built now, taken out of ``later`` (order kept)."""
    ready = [d for d in later if readiness.ready(*split_draw(d, config)[:2])]
    taken = {id(d) for d in ready}
    later[:] = [d for d in later if id(d) not in taken]
    return ready


def _explicit(cases: Iterable[Any], tour: bool, config: KernelConfig, res: CampaignResult, best: list, configs: dict,
              end: Callable[[], float], observe: Any, run: Any, expected: Any, found: Any,
              readiness: Any = None, postpone: Optional[list] = None) -> bool:
    """Run fixed cases in order (``run(case, cfg)``): the opening tour's (``tour``; with ``readiness``, each
    waits for its kernels, or with ``postpone`` is appended to it when they are not built yet) or the aimed
    ones (``_as_ready``). True (and ``best`` set) at the first failure that ``expected`` does not explain
    (``found(result)`` announces it)."""
    for drawn in cases:
        if interrupt.requested():
            res.stopped_by = StopReason.INTERRUPTED
            return False
        if time.perf_counter() > end():
            res.stopped_by = StopReason.TIME
            return False
        case, cfg, overrides = split_draw(drawn, config)
        if postpone is not None and readiness.building_started and not readiness.ready(case, cfg):
            postpone.append(drawn)
            continue
        if readiness is not None:
            readiness.wait(case, cfg, end() - time.perf_counter())
        try:
            result = run(case, cfg)
        except Unmaterializable as e:
            res.unmaterialized(e, f"tour: {case}")
            continue
        except CaseTimedOut:
            continue  # too big for the time left; the next tour case may fit
        except CaseInterrupted:
            res.stopped_by = StopReason.INTERRUPTED
            return False
        known = _explained(result, expected)
        res.count(result, known, expected is not None, observe)
        if tour:
            res.tour_examples += 1
        else:
            res.fill_examples += 1
        if not result.ok and not known:
            found(result)
            configs[id(result)] = (cfg, overrides)
            best[:] = [result]
            return True
    return False
