"""Checkpoints (GX results, Data Docs, the run log) and the quality report, on a real lake."""

from __future__ import annotations

import dataclasses
import re

import pandas as pd
import pytest

from outoforder.errors import ConfigError, QualityError
from outoforder.io import delta
from outoforder.io.tables import QUALITY_MEASURES, QUALITY_RUNS
from outoforder.quality.checkpoints import conclude, run_checkpoint
from outoforder.quality.measures import record_measures
from outoforder.quality.report import build_reports

pytestmark = [pytest.mark.spark, pytest.mark.delta]


def _frames(spark, recall):
    # the results in Spark, the per-period recall in pandas: GX's two engines in one checkpoint
    results = spark.createDataFrame(pd.DataFrame({"stored_rows": [2, 1], "distinct_pairs": [2, 1]}))
    return {"join_results": results, "join_recall": pd.DataFrame({"recall": recall})}


@pytest.fixture
def settings(settings):
    """The session's test settings with Data Docs on: this module checks them."""
    return dataclasses.replace(settings, quality=dataclasses.replace(settings.quality, build_docs=True))


def test_a_checkpoint_of_pandas_frames_only_records_its_run_with_the_session(spark, settings):
    windows = pd.DataFrame({"accounted": [True, True], "emissions": [1, 2], "hit_rate": [1.0, None]})
    out = run_checkpoint(
        settings, "topk", {"topk_completeness": windows, "topk_accuracy": windows.iloc[:1]},
        source="s", job="tk-1", run_name="r1", eps_min=0.9,
    )  # fmt: skip
    assert {r.suite: r.success for r in out} == {"topk_completeness": False, "topk_accuracy": True}
    runs = delta.read(spark, QUALITY_RUNS, settings.lake_root).collect()
    assert sorted((r["suite"], r["success"]) for r in runs) == [
        ("topk_accuracy", True),
        ("topk_completeness", False),
    ]


def test_checkpoint_keeps_results_docs_and_one_row_per_suite_per_run(spark, settings):
    first = run_checkpoint(
        settings,
        "join",
        _frames(spark, [0.99, 0.8]),
        source="s",
        job="qj-1",
        run_name="join_stream__r1",
        q_user=0.9,
        periods_met=1.0,
    )
    verdicts = {r.suite: r.success for r in first}
    assert verdicts == {"join_results": True, "join_recall": False}
    docs = settings.quality.docs_dir
    assert (docs / "index.html").is_file()
    for r in first:
        assert r.docs_page is not None and (docs / r.docs_page).is_file()
        assert "join_stream__r1" in r.docs_page
    # every page loads its scripts, styles and fonts from the site itself (its copies exist), none
    # from another origin (infra/datadocs/assets.toml, outoforder.quality.docs_assets)
    pages = list(docs.rglob("*.html"))
    assert len(pages) >= 3
    for page in pages:
        text = page.read_text()
        loads = re.findall(
            r'<(?:script|img)[^>]*\bsrc="([^"]+)"|<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"', text
        )
        addresses = [a or b for a, b in loads]
        assert addresses, page  # the check reads the pages' tags
        assert not [a for a in addresses if "//" in a], page
        assert all((page.parent / a).resolve().is_file() for a in addresses), page
    with pytest.raises(QualityError, match="join_recall"):
        conclude(first, "stream join", fail=True)
    conclude(first, "stream join", fail=False)  # warn: reported, not raised
    # the same run again replaces its rows; another run adds its own
    run_checkpoint(
        settings,
        "join",
        _frames(spark, [0.99]),
        source="s",
        job="qj-1",
        run_name="join_stream__r1",
        q_user=0.9,
        periods_met=1.0,
    )
    run_checkpoint(
        settings,
        "join",
        _frames(spark, [0.95]),
        source="s",
        job="qj-1",
        run_name="join_stream__r2",
        q_user=0.9,
        periods_met=1.0,
    )
    runs = delta.read(spark, QUALITY_RUNS, settings.lake_root).toPandas()
    assert sorted(runs["run_name"]) == ["join_stream__r1"] * 2 + ["join_stream__r2"] * 2
    assert runs["success"].all()  # the re-run of r1 passed and replaced the failed verdict
    index = (docs / "index.html").read_text()
    assert index.count("join_recall") >= 3  # every validation so far is listed in Data Docs


def test_checkpoint_refuses_unknown_names(spark, settings):
    frame = spark.createDataFrame(pd.DataFrame({"recall": [1.0]}))
    with pytest.raises(ConfigError, match="unknown checkpoint 'nope'"):
        run_checkpoint(settings, "nope", {"x": frame}, source="s", job="j")
    with pytest.raises(ConfigError, match="checkpoint 'join' has no suite topk_accuracy"):
        run_checkpoint(settings, "join", {"topk_accuracy": frame}, source="s", job="j")


def test_docs_can_be_switched_off(spark, settings):
    quiet = dataclasses.replace(settings, quality=dataclasses.replace(settings.quality, build_docs=False))
    (r,) = run_checkpoint(
        quiet,
        "join",
        {"join_recall": _frames(spark, [1.0])["join_recall"]},
        source="s",
        job="j",
        q_user=0.5,
        periods_met=1.0,
    )
    assert r.success and r.docs_page is None
    assert not (quiet.quality.docs_dir / "index.html").exists()


def test_the_aggregate_check_judges_a_run_s_windows_with_the_job_s_latest_before_them(settings):
    """A minute's share of overlapping windows is mostly noise: (ε, δ) is judged over enough of them."""
    from outoforder.quality.measures import with_latest_before

    def with_earlier(settings, source, job, judged, at_least, after=None):
        cols = ("wid", None, "met_at_emission")
        return with_latest_before(settings, source, job, "agg_error", judged, cols, at_least, after)

    slide = 100_000
    at_least = settings.quality.windows_judged(slide)
    assert at_least == 6_000  # ten minutes of windows sliding by 0.1 s

    def record(first: int, n: int, met) -> None:
        rows = [(w, w * slide, w * slide + 500_000, 0.0, 0.05, met(w)) for w in range(first, first + n)]
        record_measures(settings, "src", "ag-1", "agg_error", rows, (first, first + n - 1))

    def verdict(judged: pd.DataFrame) -> bool:
        (r,) = run_checkpoint(
            settings, "aggregate", {"agg_error": judged}, source="src", job="ag-1", delta=0.05
        )
        return r.success

    # a run of a minute: 600 windows, 94 % within ε (a spread a 96 % stream shows minute by minute)
    run = pd.DataFrame({"wid": range(9_000, 9_600), "met_at_emission": [w % 50 >= 3 for w in range(600)]})
    assert not verdict(run)
    alone = with_earlier(settings, "src", "ag-1", run, at_least)
    assert alone.equals(run)  # a young job: nothing earlier yet, the run's windows alone
    record(0, 9_000, lambda w: w % 25 != 0)  # the job's history: 96 % within ε
    together = with_earlier(settings, "src", "ag-1", run, at_least)
    assert len(together) == at_least and together["wid"].tolist() == list(range(3_600, 9_600))
    assert verdict(together)
    # the latest before it 93 %: the same run's windows now fail with them
    record(3_600, 5_400, lambda w: w % 100 >= 7)
    assert not verdict(with_earlier(settings, "src", "ag-1", run, at_least))
    # windows a failed verdict judged are not judged again: only those after it join
    after = with_earlier(settings, "src", "ag-1", run, at_least, after=7_999)
    assert after["wid"].tolist() == list(range(8_000, 9_600))
    # a run judging nothing adds nothing (nothing new to judge)
    assert with_earlier(settings, "src", "ag-1", run.iloc[:0], at_least).empty


def test_the_top_k_check_judges_a_run_s_few_windows_with_the_job_s_latest_before_them(settings):
    """ε_min is a mean over windows: one missed window of a minute's twelve is not a verdict."""
    from outoforder.quality.measures import with_latest_before

    slide = 5_000_000
    at_least = settings.quality.windows_judged(slide)
    assert at_least == 120
    rates = [1.0 if w % 40 else 0.0 for w in range(300)]  # the job's history: 97.5 %
    record_measures(
        settings, "src", "tk-1", "topk_hit_rate",
        [(w, w * slide, w * slide + 60_000_000, r, 0.95, r >= 0.95) for w, r in enumerate(rates)],
    )  # fmt: skip
    run = pd.DataFrame({"window_id": range(300, 312), "hit_rate": [1.0] * 11 + [0.0], "emissions": 1})

    def verdict(judged: pd.DataFrame) -> bool:
        (r,) = run_checkpoint(
            settings, "topk", {"topk_accuracy": judged}, source="src", job="tk-1", eps_min=0.95
        )
        return r.success

    assert not verdict(run)  # 11 of 12: 0.917
    together = with_latest_before(
        settings, "src", "tk-1", "topk_hit_rate", run, ("window_id", "hit_rate", None), at_least
    )
    assert len(together) == 120 and list(together.columns) == ["window_id", "hit_rate"]
    assert together["window_id"].tolist() == list(range(192, 312))
    assert verdict(together)


def test_the_join_check_borrows_only_the_periods_after_its_newest_failed_verdict(settings, monkeypatch):
    """A missed period is reported once: later runs judge theirs with the periods after it."""
    from outoforder.io import deltars
    from outoforder.io.tables import JOIN_METRICS
    from outoforder.stages.context import StageContext
    from outoforder.stages.join import validate as join_check
    from outoforder.stages.join.spec import JoinJob

    job, period = JoinJob(), JoinJob().period_us
    ctx = StageContext("validate-join", settings, "src", job)
    method = f"stream:{job.job_id()}"
    cols = JOIN_METRICS.schema.fieldNames()

    def metrics(periods: range, recall: float) -> pd.DataFrame:
        rows = [
            ("src", method, p, p * period, 10, int(10 * recall), recall, recall >= job.q_user, job.q_user)
            + (None,) * (len(cols) - 9)
            for p in periods
        ]
        return pd.DataFrame(rows, columns=cols)

    history = metrics(range(30), 1.0)
    deltars.replace_rows(JOIN_METRICS, settings.lake_root, settings.storage, history.itertuples(index=False),
                         {"source": "src", "method": method})  # fmt: skip
    run = metrics(range(30, 33), 1.0)
    together = join_check._with_earlier(ctx, run, 20)
    assert together["period"].tolist() == list(range(13, 33))  # no failed verdict yet
    monkeypatch.setattr(join_check, "_last_failed_period", lambda ctx, origin: 24)
    after = join_check._with_earlier(ctx, run, 20)
    assert after["period"].tolist() == list(range(25, 33))


def test_report_shows_targets_measures_and_validations_cumulative_and_per_run(spark, settings):
    period = 5_000_000
    t0 = 10_000_000_000
    record_measures(
        settings, "src", "qj-1", "join_recall",
        [(i, t0 + i * period, t0 + (i + 1) * period, r, 0.9, r >= 0.9)
         for i, r in enumerate([0.95, 0.85, 1.0])],
    )  # fmt: skip
    record_measures(
        settings, "src", "tk-1", "topk_hit_rate",
        [(i, t0 + i * period, t0 + (i + 1) * period, 1.0, 0.95, True) for i in range(4)],
    )  # fmt: skip
    run_checkpoint(
        settings,
        "join",
        _frames(spark, [0.95, 0.85, 1.0]),
        source="src",
        job="qj-1",
        run_name="a",
        q_user=0.9,
        periods_met=1.0,
    )
    run_checkpoint(
        settings,
        "join",
        _frames(spark, [1.0]),
        source="src",
        job="qj-1",
        run_name="b",
        q_user=0.9,
        periods_met=1.0,
    )
    # another job's periods were out of reach under its retention bound: a warning, not a failure
    bound = {**_frames(spark, [0.95]), "join_feasibility": pd.DataFrame({"reachable": [0.5, 1.0]})}
    run_checkpoint(
        settings, "join", bound, source="src", job="qj-2", run_name="c", q_user=0.9, periods_met=1.0
    )
    # re-recording replaces the job's measure rows (validations recompute the whole history)
    record_measures(
        settings, "src", "tk-1", "topk_hit_rate",
        [(i, t0 + i * period, t0 + (i + 1) * period, 1.0, 0.95, True) for i in range(4)],
    )  # fmt: skip
    assert delta.read(spark, QUALITY_MEASURES, settings.lake_root).count() == 7

    end = t0 + 2 * period + 1
    cumulative, run_page = build_reports(spark, settings, run_name="b", start_us=t0, end_us=end)
    assert cumulative == settings.quality.reports_dir / "quality" / "index.html"
    page = cumulative.read_text()
    assert "<svg" in page and "<script" not in page  # self-contained, static
    assert "recall ≥ 0.9 per period" in page and "mean 0.9333, 66.7% of 3 met" in page
    assert "mean accuracy ≥ 0.95" in page
    assert "Stream join (QJoin)" in page and "Continuous top-k" in page
    assert "Sliding-window aggregates" not in page  # nothing of it in this lake
    links = re.findall(r'href="(\.\./data_docs/validations/[^"]+)"', page)
    assert links and all((cumulative.parent / link).resolve().is_file() for link in links)
    assert page.count(">FAILED<") == 0  # the latest verdict per suite is b's (passed)
    assert page.count(">OUT OF REACH<") == 1  # qj-2's join_feasibility

    one = run_page.read_text()
    assert run_page.parent == cumulative.parent / "runs"
    assert "mean 0.9000, 50.0% of 2 met" in one  # only the periods ending inside the run's interval
    assert ">b<" in one and ">a<" not in one  # only this run's validations
    assert 'href="../index.html"' in one


def test_the_join_check_judges_a_share_of_periods(spark, settings):
    """At 0.95 a budget of one missed period in twenty, also while fewer have been judged; at 1.0 none."""

    def verdict(recall: list[float], share: float) -> bool:
        quality = dataclasses.replace(settings.quality, periods_met=share)
        (r,) = run_checkpoint(
            settings, "join", {"join_recall": pd.DataFrame({"recall": recall})},
            source="s", job="qj-share", q_user=0.9, periods_met=quality.periods_required(len(recall)),
        )  # fmt: skip
        return r.success

    assert settings.quality.periods_met == 0.95 and settings.quality.periods_judged == 20
    # a run judges its periods with the job's latest: ten minutes of them, as the aggregates' windows
    assert settings.quality.periods_borrowed(5_000_000) == 120
    assert verdict([1.0] * 19 + [0.5], 0.95)
    assert verdict([1.0] * 5 + [0.5], 0.95)  # a young job: one miss is within the budget of twenty
    assert not verdict([1.0] * 18 + [0.5, 0.5], 0.95)
    assert not verdict([1.0] * 4 + [0.5, 0.5], 0.95)
    assert verdict([1.0] * 38 + [0.5, 0.5], 0.95)
    assert not verdict([1.0] * 37 + [0.5] * 3, 0.95)
    assert not verdict([1.0] * 19 + [0.5], 1.0)
