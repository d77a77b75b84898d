"""Shared test set-up.

Tests run with ``--import-mode=importlib`` (test files in different folders share names), so each
test folder's helper modules (gdb.py, hlo_corpus.py, harness.py, ...) are made importable here; their
names are unique across folders. TF's C++ logs stay quiet.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_HERE = os.path.dirname(os.path.abspath(__file__))
for _root, _dirs, _files in os.walk(_HERE):
    _dirs[:] = [d for d in _dirs if d not in ("data", "artifacts", "__pycache__")]
    if _root not in sys.path:
        sys.path.insert(0, _root)
