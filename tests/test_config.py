import pytest

from outoforder.config import REPO_ROOT, load_settings
from outoforder.errors import ConfigError


def test_defaults_are_the_embedded_local_setup():
    s = load_settings(env={})
    assert s.spark.master == "local[2]"
    assert 2 <= s.spark.shuffle_partitions <= 8
    assert s.lake_root == str(REPO_ROOT / ".local" / "lake")
    assert s.work_dir == REPO_ROOT / ".local"
    assert s.ingest.plausible_range("ooo")[0] < s.ingest.plausible_range("ooo")[1]


def test_environment_overrides_the_file(tmp_path):
    s = load_settings(env={"OOO_SPARK_MASTER": "spark://h:7077", "OOO_LAKE_ROOT": str(tmp_path)})
    assert s.spark.master == "spark://h:7077"
    assert s.lake_root == str(tmp_path)


def test_a_user_file_overrides_only_what_it_names(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('[spark]\nshuffle_partitions = 8\n[spark.conf]\n"spark.x" = "1"\n')
    s = load_settings(f, env={})
    assert s.spark.shuffle_partitions == 8
    assert s.spark.master == "local[2]"
    assert s.spark.conf["spark.x"] == "1"
    assert s.spark.conf["spark.sql.adaptive.enabled"] == "true"


def test_a_stage_gets_its_own_sql_settings_over_the_common_ones(tmp_path, capsys):
    from outoforder.stages.cli import main

    f = tmp_path / "mine.toml"
    f.write_text('[spark.stage_conf.join-stream]\n"spark.sql.codegen.wholeStage" = "true"\n')
    s = load_settings(f, env={})
    assert s.spark.stage_conf == {"join-stream": {"spark.sql.codegen.wholeStage": "true"}}
    assert "spark.sql.codegen.wholeStage" not in s.session_conf()  # the other stages' sessions keep theirs
    f.write_text('[spark.stage_conf.join-steam]\n"spark.sql.codegen.wholeStage" = "true"\n')
    assert main(["--config", str(f), "checksum"]) == 2  # before any session is opened
    assert "unknown stage join-steam" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[spark]\nshuffle_partitions = 0\n", "shuffle_partitions"),
        ("[ingest.plausible_event_us]\nooo = [5, 1]\n", "lower bound"),
        ("[spark\n", "not valid TOML"),
        ("[ingest]\nbatch_rows = 'many'\n", "invalid setting"),
        ("[quality]\ncumulative_every_s = -1\n", "cumulative_every_s"),
        ("[spark]\nremote = 'localhost:15002'\n", "sc://host:port"),
        ("[kafka]\ncover_poll_s = 0\n", "cover_poll_s"),
        ('[spark.stage_conf.join-stream]\n"spark.driver.memory" = "8g"\n', "cannot be set per session"),
        ('[spark.stage_conf.report]\n"spark.sql.extensions" = "x"\n', "cannot be set per session"),
    ],
)
def test_bad_settings_fail_with_a_clear_message(tmp_path, text, match):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_settings(f, env={})


def test_missing_jars_explain_how_to_fix_it(tmp_path):
    s = load_settings(env={"OOO_SPARK_JARS_DIR": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"infra/setup\.sh"):
        s.spark_conf()
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml", env={})


def test_an_s3a_lake_adds_the_s3a_settings_and_jars_and_keeps_local_files_local(tmp_path):
    delta, s3a = tmp_path / "delta", tmp_path / "s3a"
    for folder, jar in ((delta, "delta-spark.jar"), (s3a, "hadoop-aws.jar")):
        folder.mkdir()
        (folder / jar).write_bytes(b"")
    env = {
        "OOO_LAKE_ROOT": "s3a://lake/prefix/",
        "OOO_SPARK_JARS_DIR": str(delta),
        "OOO_S3A_JARS_DIR": str(s3a),
        "OOO_S3_ACCESS_KEY": "k",
        "OOO_S3_SECRET_KEY": "s",
    }
    s = load_settings(env=env)
    assert s.lake_is_remote and s.lake_root == "s3a://lake/prefix"
    assert s.work_dir == REPO_ROOT / ".local"
    conf = s.spark_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.input.stream.type"] == "classic"
    assert conf["spark.executor.extraClassPath"] == f"{delta / 'delta-spark.jar'}:{s3a / 'hadoop-aws.jar'}"
    assert "spark.jars" not in conf
    # the keys never reach a launcher (its command line); a session sets them once it runs, and the
    # Spark Connect server's owner-only properties file is the one place that carries them
    assert not any(v in ("k", "s") for v in conf.values())
    assert s.storage.credentials() == {"fs.s3a.access.key": "k", "fs.s3a.secret.key": "s"}
    assert s.spark_conf(with_credentials=True)["spark.hadoop.fs.s3a.secret.key"] == "s"
    assert conf["spark.delta.logStore.s3a.impl"] == "io.outoforder.delta.S3ConditionalLogStore"
    local = load_settings(env={"OOO_SPARK_JARS_DIR": str(delta)}).spark_conf()
    assert not any(k.startswith("spark.hadoop.fs.s3a") for k in local)
    assert local["spark.driver.extraClassPath"] == str(delta / "delta-spark.jar")
    with pytest.raises(ConfigError, match="OOO_S3_ACCESS_KEY"):
        load_settings(env={**env, "OOO_S3_ACCESS_KEY": ""}).spark_conf()
    with pytest.raises(ConfigError, match="only local folders and s3a"):
        load_settings(env={"OOO_LAKE_ROOT": "gs://x"})


def test_the_stage_settings_go_on_a_session_the_stage_opens_not_on_one_it_shares(tmp_path, monkeypatch):
    from pyspark.sql import SparkSession

    from outoforder.spark import session
    from outoforder.stages.context import open_session

    class Conf(dict):
        def set(self, key, value):
            self[key] = value

        def get(self, key, default=None):
            return super().get(key, default)

    class Session:
        def __init__(self):
            self.conf = Conf()

    f = tmp_path / "mine.toml"
    f.write_text('[spark.stage_conf.join-stream]\n"spark.sql.codegen.wholeStage" = "true"\n')
    settings = load_settings(f, env={})
    for running, expect in ((None, {"spark.sql.codegen.wholeStage": "true"}), (Session(), {})):
        opened = Session()
        monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda r=running: r))
        monkeypatch.setattr(session, "get_spark", lambda *a, o=opened, **k: o)
        assert open_session(settings, "join-stream") is opened
        assert dict(opened.conf) == expect
        assert open_session(settings, "report").conf == expect  # other stages: only the common settings


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[lake]\nrooot = "/tmp/x"\n', r"unknown setting 'lake.rooot' in \[lake\]; did you mean lake.root\?"),
        ("[qualty]\non_violation = 'warn'\n", r"'qualty' in the top level; did you mean quality\?"),
        ("[spark]\nshuffle_partition = 8\n", r"did you mean spark.shuffle_partitions\?"),
        ("[kafka]\nbootstrap_servers = 'x'\n", r"'kafka.bootstrap_servers'.*did you mean kafka.bootstrap\?"),
    ],
)
def test_a_misspelt_setting_is_refused_with_the_nearest_known_key(tmp_path, text, match):
    f = tmp_path / "mine.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):  # it used to be ignored: the default stood silently
        load_settings(f, env={})


def test_the_tables_of_user_names_take_any_key(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        '[spark.conf]\n"spark.anything" = "1"\n[spark.stage_conf.join-stream]\n"spark.sql.x" = "2"\n'
        '[ingest.plausible_event_us]\nmine = [0, 10]\n[dags]\nsource = "yard"\n[dags.join]\nq_user = 0.9\n'
    )
    s = load_settings(f, env={})
    assert s.spark.conf["spark.anything"] == "1" and s.ingest.plausible_range("mine") == (0, 10)


def test_the_object_stores_secret_is_in_no_repr():
    # a settings object shows up in log lines and tracebacks' locals: the secret must not
    settings = load_settings(env={"OOO_S3_ACCESS_KEY": "pipeline-1", "OOO_S3_SECRET_KEY": "s3cr3t-v4lue"})
    assert settings.storage.secret_key == "s3cr3t-v4lue"
    assert "s3cr3t-v4lue" not in repr(settings) and "s3cr3t-v4lue" not in str(settings.storage)
    assert "pipeline-1" in repr(settings.storage)
