"""Start-up secrets: generated once into var/ with mode 0600, malformed values stop start-up."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from freellm_site import keyfiles

ROOT = Path(__file__).resolve().parent.parent


def run_check(var_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("FREELLM_SECRET_KEY", "DJANGO_SECRET_KEY")}
    clean.update({"FREELLM_VAR_DIR": str(var_dir), "DATABASE_URL": f"sqlite:///{var_dir}/db.sqlite3", **env})
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60
    )


def test_absent_secrets_are_generated_once_with_mode_0600(tmp_path):
    first = run_check(tmp_path)
    assert first.returncode == 0, first.stderr
    files = [tmp_path / "freellm_secret.key", tmp_path / "django_secret.key"]
    contents = [path.read_text() for path in files]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    second = run_check(tmp_path)

    assert second.returncode == 0, second.stderr
    assert [path.read_text() for path in files] == contents
    assert len(bytes.fromhex(contents[0].strip())) == 32


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("FREELLM_SECRET_KEY", "not-hex", "FREELLM_SECRET_KEY must be exactly 64 hex characters"),
        ("FREELLM_SECRET_KEY", "ab" * 16, "FREELLM_SECRET_KEY must be exactly 64 hex characters"),
        ("DJANGO_SECRET_KEY", "short", "DJANGO_SECRET_KEY must be at least 50 characters"),
    ],
)
def test_a_malformed_secret_stops_start_up_with_a_clear_message(tmp_path, name, value, expected):
    result = run_check(tmp_path, **{name: value})

    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert value not in result.stderr


def test_a_corrupt_generated_file_stops_start_up_naming_the_file(tmp_path):
    (tmp_path / "freellm_secret.key").write_text("garbage\n")

    result = run_check(tmp_path)

    assert result.returncode == 2
    assert "freellm_secret.key" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_environment_wins_over_the_file(tmp_path):
    value = "11" * 32

    assert keyfiles.encryption_key(tmp_path, value) == bytes.fromhex(value)
    assert not (tmp_path / "freellm_secret.key").exists()
