"""HPM's batch step in two parts (core/windows/batch.py) equals the tuple-at-a-time operator.

Driven over micro-batches as the stage drives it (the policy's K fixed per batch, observations
applied at the batch's end), the arrival step and the per-window step give the reference's
emissions, late memberships, observations and K per arrival; a batch split into ranges of
arrivals, each from the carry the summaries fold to, gives the batch's own events.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.control.pd import PDController
from outoforder.core.joins.progress import NEG
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.batch import (
    LEVEL_KEYS,
    arrival_events,
    arrival_state,
    foreseen_needs,
    scan_fold,
    scan_summary,
    window_step,
)
from outoforder.core.windows.buffered import BufferedRun, WindowQuery
from outoforder.core.windows.hpm import buffered_reference
from outoforder.core.windows.lateness import Profiles, bucket_of
from outoforder.core.windows.slack import FixedSlack, HPMSlack, LatenessSlack, MaxDelaySlack
from tests.core.windows.test_buffered import AGGS, MODELS, assert_same, make_stream


def rule_of(policy: Any) -> str | int | float:
    if isinstance(policy, FixedSlack):
        return policy.k_us
    if isinstance(policy, MaxDelaySlack):
        return "max-delay"
    if isinstance(policy, LatenessSlack):
        return policy.slack(0)  # constant between observations
    return float(policy.state.alpha)


def run_batches(ts, vals, query: WindowQuery, policy: Any, cuts: list[int], flush: bool) -> BufferedRun:
    """The two steps over batches ``[cuts[i], cuts[i+1])``, state carried as the stage carries it."""
    w = query.windows
    carry: dict[str, Any] = {"t_max": None, "k": 0, "c": None}
    buffer = {
        "wid": np.zeros(0, np.int64),
        "seq": np.zeros(0, np.int64),
        "ts": np.zeros(0, np.int64),
        "v": np.zeros(0),
        "bucket": np.zeros(0, np.int64),
    }
    watch = {
        "wid": np.zeros(0, np.int64),
        "n_rcv": np.zeros(0, np.int64),
        "n_late": np.zeros(0, np.int64),
        "lambda_thr": np.zeros(0),
    }
    watch_profiles = Profiles.empty(0)
    out: dict[str, list[Any]] = {k: [] for k in BufferedRun.__dataclass_fields__}
    bounds = list(itertools.pairwise(cuts))
    for b, (lo, hi) in enumerate(bounds):
        seq = np.arange(lo, hi, dtype=np.int64)
        t, v = np.asarray(ts[lo:hi], dtype=np.int64), np.asarray(vals[lo:hi], dtype=np.float64)
        if policy.follows_unsettled and carry["c"] is not None:  # the batch's K reads its late members
            fore = foreseen_needs(
                aggregate=query.aggregate,
                eps=query.eps,
                delta=query.delta,
                windows=w,
                horizon_us=query.coverage_horizon_us,
                frontier=carry["c"],
                ts=t,
                v=v,
                t_before=arrival_state(t, carry, 0)["t_before"],
                watch=watch,
                watch_profiles=watch_profiles,
            )
            policy.observe_unsettled(fore["needed_us"].tolist())
        ev = arrival_events(t, carry, rule_of(policy), w, query.coverage_horizon_us)
        st_ = ev.state
        members = {
            "wid": np.concatenate([buffer["wid"], ev.member_wid]),
            "seq": np.concatenate([buffer["seq"], seq[ev.member]]),
            "ts": np.concatenate([buffer["ts"], t[ev.member]]),
            "v": np.concatenate([buffer["v"], v[ev.member]]),
            "late": np.concatenate([np.zeros(buffer["wid"].size, bool), ev.late]),
            "c_before": np.concatenate([np.full(buffer["wid"].size, NEG), st_["c_before"][ev.member]]),
            "bucket": np.concatenate(
                [buffer["bucket"], bucket_of(st_["t_before"][ev.member] - w.end_of(ev.member_wid))]
            ),
        }
        close = {
            "wid": ev.close_wid,
            "at": seq[ev.close],
            "slack": st_["slack"][ev.close],
            "t_max": st_["t_max"][ev.close],
        }
        last = b == len(bounds) - 1
        flush_at = None
        if flush and last:
            flush_at = (hi, int(st_["slack"][-1]) if t.size else 0, int(st_["t_max"][-1]) if t.size else 0)
        res = window_step(
            aggregate=query.aggregate,
            eps=query.eps,
            delta=query.delta,
            windows=w,
            horizon_us=query.coverage_horizon_us,
            members=members,
            watch=watch,
            watch_profiles=watch_profiles,
            close=close,
            observe={"wid": ev.observe_wid, "at": seq[ev.observe]},
            flush=flush_at,
        )
        e = res.emitted
        out["window_ids"] += e["wid"].tolist()
        out["values"] += e["value"].tolist()
        out["received"] += e["n_rcv"].tolist()
        out["emitted_at"] += e["emitted_at"].tolist()
        out["slack_at_close"] += e["slack_at_close"].tolist()
        out["lag_us"] += e["lag_us"].tolist()
        out["lambda_thr"] += e["lambda_thr"].tolist()
        order = np.lexsort((res.late["wid"], res.late["seq"]))
        out["late_arrival"] += res.late["seq"][order].tolist()
        out["late_window"] += res.late["wid"][order].tolist()
        o = res.observed
        order = np.lexsort((o["wid"], o["obs_at"]))
        for key, col in (
            ("obs_window", "wid"),
            ("obs_at", "obs_at"),
            ("obs_received", "n_rcv"),
            ("obs_late", "n_late"),
            ("obs_lambda_thr", "lambda_thr"),
            ("obs_needed_us", "needed_us"),
        ):
            out[key] += o[col][order].tolist()
        out["slack"] += st_["slack"].tolist()
        for r, lt, lam, need in zip(
            o["n_rcv"][order], o["n_late"][order], o["lambda_thr"][order], o["needed_us"][order], strict=True
        ):
            policy.observe_window(int(r) / max(int(r) + int(lt), 1), float(lam), int(need))
        policy.observe_unsettled(res.unsettled["needed_us"].tolist())
        buffer, watch, watch_profiles = res.buffer, res.watch, res.watch_profiles
        if t.size:
            carry = {"t_max": int(st_["t_max"][-1]), "k": int(st_["k"][-1]), "c": int(st_["c"][-1])}
    arrays = {
        k: np.asarray(v, dtype=np.float64 if k in ("values", "lambda_thr", "obs_lambda_thr") else np.int64)
        for k, v in out.items()
    }
    return BufferedRun(**arrays)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 10_000),
    st.sampled_from(MODELS),
    st.sampled_from(AGGS),
    st.sampled_from(["kslack", "mp", "hpm", "lateness"]),
    st.integers(1, 40),
    st.booleans(),
)
def test_two_steps_over_batches_equal_the_reference(seed, model, agg, mode, batch, flush):
    ts, vals = make_stream(seed, 120, model)
    query = WindowQuery(Windows(100, 20), agg, coverage_horizon_us=150)
    cuts = sorted({0, len(ts), *range(batch, len(ts), batch)})
    policy = {
        "kslack": FixedSlack(30),
        "mp": MaxDelaySlack(),
        "hpm": HPMSlack(PDController(lambda_thr=0.9, alpha_initial=0.3)),
        "lateness": LatenessSlack(delta=0.2, windows=5, initial_us=20),
    }
    twin = {
        "kslack": FixedSlack(30),
        "mp": MaxDelaySlack(),
        "hpm": HPMSlack(PDController(lambda_thr=0.9, alpha_initial=0.3)),
        "lateness": LatenessSlack(delta=0.2, windows=5, initial_us=20),
    }
    ref = buffered_reference(ts, vals, query, policy[mode], control_points=cuts[1:], flush=flush)
    got = run_batches(ts, vals, query, twin[mode], cuts, flush)
    assert_same(got, ref)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 10_000),
    st.sampled_from(MODELS),
    st.lists(st.integers(1, 119), max_size=5),
    st.sampled_from([0.0, 0.4, 1.0, "max-delay", 25]),
)
def test_a_batch_split_into_ranges_gives_the_batchs_events(seed, model, cuts, rule):
    ts, _ = make_stream(seed, 120, model)
    w = Windows(100, 20)
    carry: dict[str, Any] = {"t_max": 900, "k": 40, "c": 700}
    whole = arrival_events(ts, carry, rule, w, 150)
    bounds = sorted({0, len(ts), *cuts})
    ranges = list(itertools.pairwise(bounds))
    carries = [dict(carry) for _ in ranges]
    for level, keys in enumerate(LEVEL_KEYS):
        for i, (lo, hi) in enumerate(ranges[:-1]):
            after = scan_fold(level, carries[i], scan_summary(level, ts[lo:hi], carries[i], rule, None))
            carries[i + 1] |= {k: after[k] for k in keys}
    parts = [arrival_events(ts[lo:hi], carries[i], rule, w, 150) for i, (lo, hi) in enumerate(ranges)]
    for key in whole.state:
        assert np.concatenate([p.state[key] for p in parts]).tolist() == whole.state[key].tolist(), key
    shift = [lo for lo, _ in ranges]

    def events(attr_idx: str, attr_wid: str) -> list[tuple[int, int]]:
        got = [
            (int(i) + s, int(x))
            for p, s in zip(parts, shift, strict=True)
            for i, x in zip(getattr(p, attr_idx), getattr(p, attr_wid), strict=True)
        ]
        return sorted(got)

    for idx, wid in (("member", "member_wid"), ("close", "close_wid"), ("observe", "observe_wid")):
        assert events(idx, wid) == sorted(
            zip(getattr(whole, idx).tolist(), getattr(whole, wid).tolist(), strict=True)
        ), idx
