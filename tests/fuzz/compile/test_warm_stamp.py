"""The warm-up's stamp: a finished warm-up is found again only for the same configs and sources."""

from __future__ import annotations

import pytest

import tbe.backend
from fuzz.compile import stamp as warm_stamp
from fuzz.compile.warmup import warmup
from tbe import KernelConfig


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(warm_stamp, "cache_dir", lambda: tmp_path)
    return tmp_path


def test_key_follows_configs_and_device():
    a, b = KernelConfig(), KernelConfig(chunk_size=128)
    assert warm_stamp.stamp_key([a], "dev") == warm_stamp.stamp_key([a, a], "dev")
    assert warm_stamp.stamp_key([a], "dev") != warm_stamp.stamp_key([b], "dev")
    assert warm_stamp.stamp_key([a], "dev") != warm_stamp.stamp_key([a, b], "dev")
    assert warm_stamp.stamp_key([a], "dev") != warm_stamp.stamp_key([a], "other device")
    assert warm_stamp.stamp_key([a], "dev") != warm_stamp.stamp_key([a], "dev", tag="tour")
    env = warm_stamp.environment("dev")
    assert warm_stamp.stamp_key([a], "dev") == warm_stamp.stamp_key([a], tag="matrix", env=env)


def test_key_follows_kernel_sources(tmp_path, monkeypatch):
    (tmp_path / "tbe").mkdir()
    kernel = tmp_path / "tbe" / "k.py"
    kernel.write_text("x = 1\n")
    monkeypatch.setattr(warm_stamp, "_REPO", tmp_path)
    monkeypatch.setattr(warm_stamp, "_SOURCES", ("tbe",))
    before = warm_stamp.stamp_key([KernelConfig()], "dev")
    kernel.write_text("x = 2\n")
    assert warm_stamp.stamp_key([KernelConfig()], "dev") != before


def test_written_stamp_is_found_and_others_are_not(cache):
    key = warm_stamp.stamp_key([KernelConfig()], "dev")
    assert warm_stamp.find(key) is None
    warm_stamp.write(key, {"seconds": 12.5, "compiled": 3})
    found = warm_stamp.find(key)
    assert found["compiled"] == 3 and found["stamped_at"]
    assert warm_stamp.find(warm_stamp.stamp_key([KernelConfig(chunk_size=128)], "dev")) is None
    assert not list(cache.rglob("*.tmp"))


def test_stamped_warmup_returns_at_once(cache, monkeypatch):
    """With a stamp for every config the warm-up runs no case (it would need a GPU here)."""
    monkeypatch.setattr(tbe.backend, "INTERPRETED", False)
    configs = [KernelConfig(), KernelConfig(chunk_size=128)]
    for c in configs:
        warm_stamp.write(warm_stamp.stamp_key([c]), {"seconds": 1.0})
    res = warmup(configs, processes=1)
    assert res.stamped_at and res.reused == 2 and res.groups == 0 and res.compiled == 0
    assert "already built" in res.text()


def test_only_unstamped_configs_are_warmed(cache, monkeypatch):
    """A stamped baseline beside a new candidate: only the candidate's groups are run."""
    import fuzz.compile.warmup as wu

    monkeypatch.setattr(tbe.backend, "INTERPRETED", False)
    ran = []
    monkeypatch.setattr(wu, "warm_groups", lambda cs: ran.extend(cs) or [])
    base, cand = KernelConfig(), KernelConfig(chunk_size=128)
    warm_stamp.write(warm_stamp.stamp_key([base]), {"seconds": 1.0})
    res = warmup([base, cand], processes=1)
    assert ran == [cand] and res.reused == 1 and not res.stamped_at
    assert warm_stamp.find(warm_stamp.stamp_key([cand])) is not None  # stamped once it finished


def test_a_failing_tour_case_is_reported_with_its_case(monkeypatch):
    """Tour groups hold bad-input cases too: a case that fails is named in the error, not a second crash."""
    import fuzz.compile.warmup as wu

    def fail(case, config, backward=True):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(wu, "exercise", fail)
    bad = [c for g in wu.tour_groups(KernelConfig()) for c in g if type(c.spec).__name__ == "BadIdCase"]
    r = wu.run_group(bad[:1])
    assert len(r["errors"]) == 1 and "no kernel" in r["errors"][0] and '"bad"' in r["errors"][0]
