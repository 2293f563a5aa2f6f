"""Memory of the running process, for every benchmark script and the harness's child processes.

Standard library only, so that every interpreter a benchmark runs (the project's, benchmarks/.venv-peers)
can import it.
"""

from __future__ import annotations

import os
import resource


def rss_mb() -> float:
    """Resident set size of this process now, in MiB (/proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB.

    VmHWM from /proc/self/status, not ru_maxrss: Linux carries ru_maxrss over from the forked
    parent across exec, so every child would report at least the parent's RSS at fork time
    (the harness's own ~200 MB after featurizing). VmHWM belongs to the fresh address space.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
