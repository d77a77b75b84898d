"""TF's XLA JIT kernel list in the persistent cache: a later process reads it from disk instead of
initialising XLA's kernel registry; what it reads is TF's own list; a corrupt entry is reported and
replaced; with the cache off TF is asked every time and nothing is written."""
from __future__ import annotations

import logging

import pytest
from tensorflow.python.framework import kernels

from tfxla_cluster.runtime.compile_cache import KERNELS_KIND, kernels_key, read_entry, xla_jit_kernels
from tfxla_cluster.tf_compat import registered_xla_jit_kernels


@pytest.fixture(scope="module")
def tf_list() -> list:
    return registered_xla_jit_kernels()


def _tf_truth() -> set[bytes]:
    """TF's registry itself (XLA's kernels are registered by now): every *_JIT KernelDef."""
    return {k.SerializeToString(deterministic=True) for k in kernels.get_all_registered_kernels().kernel
            if k.device_type.endswith("_JIT")}


def _never() -> list:
    raise AssertionError("TF was asked although the persistent cache holds the list")


def _entries(directory) -> list:
    return [p for p in directory.glob("*.tfxla") if read_entry(p)[0].get("kind") == KERNELS_KIND]


def test_a_later_process_reads_tfs_list_from_disk(tmp_path, monkeypatch, tf_list):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))
    first = xla_jit_kernels(lambda: tf_list)
    assert len(_entries(tmp_path)) == 1
    loaded = xla_jit_kernels(_never)
    assert [k.SerializeToString(deterministic=True) for k in loaded] == \
        [k.SerializeToString(deterministic=True) for k in first]
    assert {k.SerializeToString(deterministic=True) for k in loaded} == _tf_truth()
    assert {k.device_type for k in loaded} >= {"XLA_CPU_JIT"}
    assert kernels_key() == kernels_key()


def test_a_corrupt_entry_is_reported_and_replaced(tmp_path, monkeypatch, caplog, tf_list):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", str(tmp_path))
    xla_jit_kernels(lambda: tf_list)
    (path,) = _entries(tmp_path)
    path.write_bytes(path.read_bytes()[:-100])
    asked = []
    with caplog.at_level(logging.WARNING, logger="tfxla_cluster.codegen"):
        got = xla_jit_kernels(lambda: asked.append(1) or tf_list)
    assert asked == [1] and len(got) == len(tf_list)
    assert any("corrupt" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)
    assert len(xla_jit_kernels(_never)) == len(tf_list)  # rewritten


def test_with_the_cache_off_tf_is_asked_and_nothing_written(tmp_path, monkeypatch, tf_list):
    monkeypatch.setenv("TFXLA_COMPILE_CACHE", "off")
    monkeypatch.chdir(tmp_path)
    asked = []
    assert len(xla_jit_kernels(lambda: asked.append(1) or tf_list)) == len(tf_list)
    assert asked == [1] and not list(tmp_path.rglob("*.tfxla"))
