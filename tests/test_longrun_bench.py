"""The long-run benchmark's own parts: the memory sampler sees the driver and its children; the summary."""

import subprocess
import sys
import time

from benchmarks.harness import MemorySampler
from benchmarks.longrun import summarize

MB = 2**20


def test_the_sampler_sees_memory_of_this_process_and_of_a_child():
    sampler = MemorySampler(every_s=0.05).start()
    try:
        time.sleep(0.3)
        driver0, others0, _ = sampler.peak()
        sampler.reset()
        block = bytearray(300 * MB)  # touched, so resident
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; b = bytearray(200 * 2**20); time.sleep(30)"],
        )
        try:
            deadline = time.monotonic() + 20
            while sampler.peak()[1] < others0 + 150 * MB and time.monotonic() < deadline:
                time.sleep(0.1)
            driver, others, both = sampler.peak()
        finally:
            child.kill()
            child.wait()
        del block
    finally:
        sampler.stop()
    assert driver >= driver0 + 250 * MB
    assert others >= others0 + 150 * MB
    assert both >= driver + others - 50 * MB  # sampled together, so close to the sum of the peaks
    assert len(sampler.trace) > 5


def _rec(stage, i, arrivals, seconds, state, full=True):
    return {
        "stage": stage, "interval": i, "arrivals": arrivals, "seconds": seconds,
        "tuples_per_s": round(arrivals / seconds), "full_interval": full, "state_rows": state,
        "peak_pss_total_mb": 100 + i, "peak_pss_driver_mb": 50, "jvm_heap_used_mb": 10 * i,
    }  # fmt: skip


def test_the_summary_leaves_the_tail_out_of_the_slowest_rate_and_reports_a_failure():
    records = [
        _rec("a", 0, 1_000, 1.0, 30),
        _rec("a", 1, 1_000, 2.0, 60),
        _rec("a", 2, 10, 1.0, 40, full=False),
        _rec("b", 0, 500, 1.0, 5),
        {"stage": "b", "interval": 1, "failed": "the top-k state ... over stream.state_budget_rows"},
    ]
    a, b = summarize(records, budget=100)
    assert (a["tuples"], a["intervals"], a["tuples_per_s"]) == (2_010, 3, 502)  # 2,010 tuples in 4 s
    assert a["slowest_interval_tuples_per_s"] == 500 and a["fastest_interval_tuples_per_s"] == 1_000
    assert (a["max_state_rows"], a["state_share_of_budget"], a["peak_pss_total_mb"]) == (60, 0.6, 102)
    assert a["failed"] == ""
    assert b["intervals"] == 1 and "state_budget_rows" in b["failed"]
