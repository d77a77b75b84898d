"""Keep TensorFlow's C++ start-up log lines off a CLI user's terminal.

TF 2.21 writes "WARNING: All log messages before absl::InitializeLog()..." and ``I0000 ...`` lines to
file descriptor 2 before its logging honours ``TF_CPP_MIN_LOG_LEVEL``. For the CLI we point fd 2 at a
pipe whose reader drops exactly those lines and forwards everything else; Python's own ``sys.stderr``
keeps writing to the real terminal. Nothing is filtered when the user set ``TF_CPP_MIN_LOG_LEVEL=0``.
"""
from __future__ import annotations

import os
import re
import sys
import threading

_TF_LOG_LINE = re.compile(rb"^(?:[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|"
                          rb"WARNING: All log messages before absl::InitializeLog|"
                          rb"To enable the following instructions:)")


def install() -> None:
    """Filter TF's C++ log lines from fd 2 for the rest of the process."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0" or os.environ.get("TFXLA_CLUSTER_DEBUG"):
        return
    try:
        real = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
    except OSError:
        return
    sys.stderr = os.fdopen(os.dup(real), "w", buffering=1, encoding="utf-8", errors="replace")

    def pump() -> None:
        with os.fdopen(read_end, "rb") as src:
            for line in src:
                if not _TF_LOG_LINE.match(line):
                    os.write(real, line)

    threading.Thread(target=pump, name="tf-log-filter", daemon=True).start()
