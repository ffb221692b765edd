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
