"""Native code generation for HLO modules with llvmlite (XLA:CPU's legacy backend, in Python).

    engine.py      JitEngine: host target machine, LLVM pipeline, loaded CodeLibrary objects
"""
from tfxla_cluster.codegen.engine import CodeLibrary, JitEngine, get_engine

__all__ = ["CodeLibrary", "JitEngine", "get_engine"]
