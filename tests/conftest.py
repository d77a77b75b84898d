"""Shared test set-up: tests import helpers (gdb.py) from this folder; TF logs stay quiet."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))
