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
    local = load_settings(env={"OOO_SPARK_JARS_DIR": str(delta)}).spark_conf()
    assert not any(k.startswith("spark.hadoop.fs.s3a") for k in local)
    assert local["spark.driver.extraClassPath"] == str(delta / "delta-spark.jar")
    with pytest.raises(ConfigError, match="OOO_S3_ACCESS_KEY"):
        load_settings(env={**env, "OOO_S3_ACCESS_KEY": ""}).spark_conf()
    with pytest.raises(ConfigError, match="only local folders and s3a"):
        load_settings(env={"OOO_LAKE_ROOT": "gs://x"})
