"""The probabilistic accumulation bound (oracles.error_model) and how it is selected.

No kernels: the model's lambda and its relation to the worst case, a real fp32 sum of
random data inside it, the environment variable and the command-line option.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oracles.error_model import BOUND
from fuzz.cli import main
from oracles.bounds import gamma
from oracles.error_model import WORST, ErrorModel, from_env, lam

U = 2.0 ** -24
PROB = ErrorModel("probabilistic")


def test_lambda_from_the_false_alarm_probability():
    """2 n exp(-lambda^2 (1-u)^2 / 2) per entry, times M entries, equals the false-alarm probability."""
    n, m, p = 10_000, 5_000, 1e-6
    x = lam(n, m, p)
    assert math.isclose(2 * n * m * math.exp(-(x * (1 - U)) ** 2 / 2), p, rel_tol=1e-9)
    assert lam(n, m, 1e-9) > x > lam(n, 1, p)  # rarer alarms or fewer entries: larger / smaller lambda


def test_probabilistic_is_never_above_worst_and_grows_like_sqrt_n():
    n = torch.tensor([1.0, 10.0, 100.0, 1e4, 1e6, 3e6], dtype=torch.float64)
    worst, prob = WORST.gamma(n, U, 1000), PROB.gamma(n, U, 1000)
    assert torch.equal(worst, gamma(n, U))
    assert bool((prob <= worst).all()) and torch.equal(prob[:2], worst[:2])  # short sums: worst case
    assert 50 < float(worst[-2] / prob[-2]) < 200   # at 1e6: about sqrt(n) / lambda tighter
    assert math.isclose(float(prob[-1] / prob[-2]), math.sqrt(3), rel_tol=0.02)


def test_a_real_fp32_sum_of_random_data_stays_inside():
    """Sequential fp32 sums of 2^20 random terms (the model's own setting) against both bounds."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 2 ** 20, generator=g, dtype=torch.float64).to(torch.float32)
    # numpy's cumsum accumulates in the array's dtype (torch's CPU cumsum does not)
    got = torch.from_numpy(np.cumsum(x.numpy(), axis=1, dtype=np.float32)[:, -1]).double()
    exact = x.double().sum(1)
    err = (got - exact).abs()
    n = torch.full((8,), float(2 ** 20), dtype=torch.float64)
    mag = x.double().abs().sum(1)
    assert bool((err > 1e-4).all()), "not an fp32 running sum"
    assert bool((err <= PROB.gamma(n, U, 8) * mag).all())
    assert float((PROB.gamma(n, U, 8) * mag).max()) < float((gamma(n, U) * mag).min()) / 50


def test_selection_by_environment_and_validation(monkeypatch):
    monkeypatch.delenv(BOUND.name, raising=False)
    assert from_env() == WORST
    monkeypatch.setenv(BOUND.name, "probabilistic")
    assert from_env().kind == "probabilistic"
    monkeypatch.setenv(BOUND.name, "loose")
    with pytest.raises(ValueError, match="TBE_FUZZ_BOUND"):
        from_env()
    with pytest.raises(ValueError, match="false_alarm"):
        ErrorModel("probabilistic", 0.0)


def test_cli_rejects_an_unknown_bound(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--bound", "loose"])
    assert e.value.code == 2 and "--bound" in capsys.readouterr().err
