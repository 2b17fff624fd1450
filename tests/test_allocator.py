"""Once a model loads, a freed block's memory stays in the process: the next block of its size faults no page in."""

import subprocess
import sys

import pytest

MEASURE = """
import resource, sys

def faults():  # minor page faults over 8 blocks of 64 MB, each written in full (bytearray zeroes it) and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(8):
        block = bytearray(64 << 20)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

default = faults()
from grpolab.models import load_model
load_model("tiny")
print(default, faults())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_after_a_model_loads_a_freed_block_is_reused_without_faulting_its_pages_in():
    # a fresh interpreter: in this one another test may have loaded a model already
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    default, kept = map(int, out.stdout.split())
    pages = 8 * (64 << 20) // 4096
    assert default > pages // 2  # glibc's default: each block mmap'd afresh, every page faulted in again
    assert kept < default // 4  # kept: the first block's pages at most
