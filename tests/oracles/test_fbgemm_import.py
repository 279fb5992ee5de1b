"""fbgemm_gpu's import-time version-table warning is dropped; every other log record passes; its named loggers
log errors only."""

from __future__ import annotations

import logging
import sys

from oracles.fbgemm_import import import_fbgemm


def test_the_version_table_warning_is_dropped_and_nothing_else(tmp_path, monkeypatch, caplog):
    # a stand-in package that logs as fbgemm_gpu does at import, to the root logger
    pkg = tmp_path / "fbgemm_gpu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import logging\n"
        "logging.warning('_fbgemm_torch_compat_table has no entry for 1.6.0 of FBGEMM')\n"
        "logging.warning('some other warning')\n")
    saved = sys.modules.pop("fbgemm_gpu", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    named = logging.getLogger("fbgemm_gpu")
    monkeypatch.setattr(named, "level", logging.NOTSET)  # its own named loggers are lowered to errors
    try:
        with caplog.at_level(logging.WARNING):
            module = import_fbgemm()
        assert module.__file__ == str(pkg / "__init__.py")
    finally:
        sys.modules.pop("fbgemm_gpu", None)
        if saved is not None:
            sys.modules["fbgemm_gpu"] = saved
    assert named.level == logging.ERROR
    assert "some other warning" in caplog.text
    assert "_fbgemm_torch_compat_table" not in caplog.text
    logging.warning("_fbgemm_torch_compat_table after the import")  # the filter is gone once imported
    assert "after the import" in caplog.text
