"""How pyspectral starts Julia (pyspectral/julia/_start.py): juliacall's
options, set only where the user has not chosen."""

from __future__ import annotations

from pyspectral.julia import _start


def test_prepare_start_sets_juliacall_defaults_only(monkeypatch):
    """Signal handling and one Julia thread per CPU unless the user chose;
    the system image as _sysimage.prepare chooses it."""
    from pyspectral.julia import _sysimage

    prepared: list[dict] = []
    monkeypatch.setattr(_sysimage, "prepare", lambda environ: prepared.append(environ))
    environ: dict[str, str] = {}
    _start.prepare_start(environ)
    assert environ == {
        "PYTHON_JULIACALL_HANDLE_SIGNALS": "yes",
        "PYTHON_JULIACALL_THREADS": str(_start.cpus()),
    }
    assert prepared == [environ]
    assert _start.cpus() >= 1
    for theirs in (
        {"PYTHON_JULIACALL_THREADS": "1", "PYTHON_JULIACALL_HANDLE_SIGNALS": "no"},
        {"JULIA_NUM_THREADS": "3"},
    ):
        environ = dict(theirs)
        _start.prepare_start(environ)
        assert "PYTHON_JULIACALL_THREADS" not in environ or environ[
            "PYTHON_JULIACALL_THREADS"
        ] == theirs.get("PYTHON_JULIACALL_THREADS")
        assert {k: environ[k] for k in theirs} == theirs


def test_prepare_start_returns_what_it_added_and_forget_removes_only_that(
    monkeypatch,
):
    """A subprocess must not inherit this process's Julia options (another
    environment's image): what prepare_start added goes again after the
    import, the user's own settings stay, and so does a value changed since."""
    from pyspectral.julia import _sysimage

    def prepare(environ):
        environ["PYTHON_JULIACALL_SYSIMAGE"] = "/img.so"

    monkeypatch.setattr(_sysimage, "prepare", prepare)
    environ = {"PYTHON_JULIACALL_HANDLE_SIGNALS": "no", "OTHER": "1"}
    added = _start.prepare_start(environ)
    assert added == {
        "PYTHON_JULIACALL_THREADS": str(_start.cpus()),
        "PYTHON_JULIACALL_SYSIMAGE": "/img.so",
    }
    environ["PYTHON_JULIACALL_THREADS"] = "7"  # changed by someone since
    _start.forget_options(added, environ)
    assert environ == {
        "PYTHON_JULIACALL_HANDLE_SIGNALS": "no",
        "OTHER": "1",
        "PYTHON_JULIACALL_THREADS": "7",
    }


def test_import_juliacall_leaves_no_options_behind(monkeypatch):
    """The import itself sees the options; the environment after it does not."""
    import importlib
    import os
    import types

    from pyspectral.julia import _sysimage

    seen: dict[str, str] = {}

    def import_module(name):
        assert name == "juliacall"
        seen.update({k: v for k, v in os.environ.items() if "JULIACALL" in k})
        return types.SimpleNamespace(Main=object())

    for key in ("PYTHON_JULIACALL_THREADS", "PYTHON_JULIACALL_HANDLE_SIGNALS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("JULIA_NUM_THREADS", raising=False)
    monkeypatch.setattr(_sysimage, "prepare", lambda environ: None)
    monkeypatch.setattr(_sysimage, "warm_up", lambda jl: False)
    monkeypatch.setattr(importlib, "import_module", import_module)
    _start.import_juliacall()
    assert seen["PYTHON_JULIACALL_HANDLE_SIGNALS"] == "yes"
    assert seen["PYTHON_JULIACALL_THREADS"] == str(_start.cpus())
    assert "PYTHON_JULIACALL_THREADS" not in os.environ
    assert "PYTHON_JULIACALL_HANDLE_SIGNALS" not in os.environ
