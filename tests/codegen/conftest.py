"""The codegen tests import their helpers (cg_helpers.py) from this folder (pytest runs with
--import-mode=importlib, which does not put test folders on sys.path)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
