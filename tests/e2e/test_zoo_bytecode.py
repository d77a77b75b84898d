"""The zoo's bytecode check (``tools/zoo.py`` ``stale_bytecode`` / ``refresh_bytecode``): a module whose
``__pycache__`` entry is missing or older than its source is found, and compiled before first calls are
timed (with ``PYTHONDONTWRITEBYTECODE`` set, Python would compile it from source in every process's first
call); fresh bytecode is left alone."""
from __future__ import annotations

import importlib.util
import py_compile
import sys

import zoo  # tools/ is on sys.path (setup.cfg pythonpath)


def test_stale_bytecode_is_found_and_refreshed(tmp_path, monkeypatch, capsys):
    package = tmp_path / "zoo_bytecode_probe"
    package.mkdir()
    init, mod = package / "__init__.py", package / "mod.py"
    init.write_text("", encoding="utf-8")
    mod.write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = package.name
    assert zoo.stale_bytecode(name) == [init, mod]          # no bytecode at all
    for source in (init, mod):
        py_compile.compile(str(source), doraise=True)
    assert zoo.stale_bytecode(name) == []
    mod.write_text("X = 22\n", encoding="utf-8")              # a new size: the header no longer matches
    assert zoo.stale_bytecode(name) == [mod]
    zoo.refresh_bytecode(name)
    assert "compiled the bytecode of 1 of 1 stale" in capsys.readouterr().err
    assert zoo.stale_bytecode(name) == []
    # The refreshed bytecode is what Python loads: the module's new value, without compiling it again.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    spec = importlib.util.find_spec(f"{name}.mod")
    assert spec.loader.get_code(f"{name}.mod") is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.X == 22


def test_no_such_package_has_no_stale_bytecode():
    assert zoo.stale_bytecode("zoo_bytecode_no_such_package") == []
