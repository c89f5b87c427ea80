"""Nothing in the repository is a credential: every password and key is generated where it is used.

MinIO's keys, PostgreSQL's passwords, the Spark Connect server's token, docker-compose's values and
Airflow's admin password are all generated at first start and kept owner-only under local state
(docs/deploy.md). This scans every tracked text file for the fixed ones the set-up used to carry and
for any secret-looking setting given a literal value.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# the fixed credentials of earlier set-ups, and trust authentication (every local user a superuser)
FIXED = ("outoforder-secret", "airflow:airflow@", "PASSWORD: airflow", "--auth=trust", "minioadmin")
# a secret-looking name set to a quoted literal (not a variable, a template or a generated value)
LITERAL = re.compile(
    r"(?i)(?<![a-z])(password|passwd|secret(_key)?|token|access_key|access\.key)['\"]?\s*[:=]\s*['\"][^'\"$\s{}<>]{6,}['\"]"
)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    out = []
    for name in names:
        path = REPO / name
        if path.suffix in {".png", ".gz", ".parquet", ".jar"} or not path.is_file():
            continue
        try:
            path.read_text()
        except UnicodeDecodeError:
            continue
        out.append(path)
    return out


def test_no_fixed_credential_in_any_tracked_file():
    this = Path(__file__).resolve()
    found = [
        f"{p.relative_to(REPO)}: {s}"
        for p in tracked_text_files()
        if p != this
        for s in FIXED
        if s in p.read_text()
    ]
    assert not found


def test_no_secret_setting_with_a_literal_value_outside_the_tests():
    files = [p for p in tracked_text_files() if p.relative_to(REPO).parts[0] != "tests"]
    assert len(files) > 100  # the scan reads the repository, not nothing
    found = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if LITERAL.search(line)
    ]
    assert not found


def test_the_literal_pattern_finds_what_it_is_for():
    assert LITERAL.search('secret_key = "hunter2-hunter2"')
    assert LITERAL.search("POSTGRES_PASSWORD: 'airflowpw'")
    assert not LITERAL.search('secret_key = "${PIPELINE_SECRET_KEY:?run it}"')
    assert not LITERAL.search("secret_key=storage.secret_key")
    assert not LITERAL.search('TOKEN_COOKIE = "_token"')  # a name, not a secret


def test_airflow_env_leaves_secrets_out(tmp_path):
    """`infra/airflow.sh env` prints the environment for the airflow CLI, not the secrets in it."""
    secret, password = "s3-secret-value-123", "db-password-456"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "OOO_S3_SECRET_KEY": secret,
        "OOO_S3_ACCESS_KEY": "pipeline-abc",
        "SPARK_CONNECT_AUTHENTICATE_TOKEN": "token-789",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://airflow:{password}@127.0.0.1:5433/airflow",
    }
    script = str(REPO / "infra" / "airflow.sh")
    out = subprocess.run(["bash", script, "env"], env=env, capture_output=True, text=True, check=True).stdout
    assert "export AIRFLOW_HOME=" in out and "export OOO_S3_ACCESS_KEY='pipeline-abc'" in out
    assert secret not in out and password not in out and "token-789" not in out
