"""ReasonCode: one enum for every "not clustered" reason, its texts TF's own.

Every text not marked ``ours`` is a string compiled into TF's libraries (compilability_check_util.cc,
mark_for_compilation_pass.cc), found in their read-only data; every code is used by the package.
"""
from __future__ import annotations

import os
import pathlib
import re
import struct

import pytest

from tfxla_cluster.tfops.reasons import ReasonCode

PKG = pathlib.Path(__file__).resolve().parents[2] / "tfxla_cluster"


def _rodata(path: str) -> bytes:
    """The ``.rodata`` section of an ELF64 little-endian shared library (where C++ string literals live)."""
    with open(path, "rb") as f:
        header = f.read(64)
        shoff, = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        f.seek(sections[shstrndx][4])
        names = f.read(sections[shstrndx][5])
        for name_off, _type, _flags, _addr, offset, size, *_ in sections:
            if names[name_off:names.index(b"\0", name_off)] == b".rodata":
                f.seek(offset)
                return f.read(size)
    raise AssertionError(f"no .rodata in {path}")


@pytest.fixture(scope="module")
def tf_strings() -> bytes:
    import tensorflow as tf

    root = os.path.dirname(tf.__file__)
    libs = [os.path.join(root, n) for n in ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2")]
    libs = [p for p in libs if os.path.exists(p)]
    if not libs or open(libs[0], "rb").read(4) != b"\x7fELF":
        pytest.skip("TF's libraries are not ELF shared objects on this platform")
    return b"".join(_rodata(p) for p in libs)


@pytest.mark.parametrize("code", [c for c in ReasonCode if not c.ours], ids=str)
def test_tf_wording_is_tfs(code, tf_strings):
    assert code.text.encode() in tf_strings, f"{code}: {code.text!r} is not a string in TF's binary"


def test_codes_are_unique_and_snake_case():
    assert len({c.value for c in ReasonCode}) == len(ReasonCode)
    assert all(re.fullmatch(r"[a-z][a-z_]*", c.value) for c in ReasonCode)


def test_every_code_is_used_by_the_package():
    text = "\n".join(p.read_text(encoding="utf-8") for p in PKG.rglob("*.py") if p.name != "reasons.py")
    unused = [c.name for c in ReasonCode if not re.search(rf"\b(R|ReasonCode)\.{c.name}\b", text)]
    assert not unused, unused


def test_codes_read_as_strings():
    import json

    assert f"[{ReasonCode.NO_XLA_KERNEL}]" == "[no_xla_kernel]"
    assert json.dumps({ReasonCode.UNIQUE: 1}) == '{"unique": 1}'
    assert ReasonCode("cycle") is ReasonCode.CYCLE
