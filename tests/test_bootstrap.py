"""What `make run` prepares before serving (gateway/bootstrap.py): config, admin, demo key."""

from __future__ import annotations

import hashlib
import io
import re

import pytest
from django.contrib.auth import get_user_model

from gateway.bootstrap import bootstrap
from gateway.config import ConfigError
from gateway.models import CatalogModel, GatewayKey, Profile, Provider


def run_bootstrap() -> str:
    out = io.StringIO()
    bootstrap(out)
    return out.getvalue()


def test_a_fresh_database_gets_the_demo_config_an_admin_and_a_demo_key(db):
    output = run_bootstrap()

    assert Provider.objects.get(name="demo").kind == "demo"
    assert CatalogModel.objects.filter(public_id="demo").exists()
    assert Profile.objects.get(is_default=True).name == "default"
    username = re.search(r"username: (\S+)", output).group(1)
    password = re.search(r"password: (\S+)", output).group(1)
    admin = get_user_model().objects.get(username=username)
    assert admin.is_superuser and admin.check_password(password)
    token = re.search(r"(fllm-[A-Za-z0-9_-]+)", output).group(1)
    key = GatewayKey.objects.get(name="demo")
    assert key.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert key.owner == admin


def test_a_second_start_prints_no_secret_and_keeps_admin_edits(db):
    run_bootstrap()
    CatalogModel.objects.filter(public_id="demo").update(enabled=False)

    output = run_bootstrap()

    assert "password" not in output
    assert "fllm-" not in output
    assert CatalogModel.objects.get(public_id="demo").enabled is False
    assert GatewayKey.objects.count() == 1
    assert get_user_model().objects.filter(is_superuser=True).count() == 1


def test_freellm_config_is_applied_at_every_start(db, settings, tmp_path):
    config = tmp_path / "team.yaml"
    config.write_text(
        "providers:\n  - {name: local, kind: openai, base_url: 'http://127.0.0.1:11434/v1'}\n"
        "models:\n  - {id: qwen, provider: local}\n"
        "profiles:\n  - {name: default, default: true, chain: [qwen]}\n"
    )
    settings.FREELLM_CONFIG = str(config)
    run_bootstrap()
    CatalogModel.objects.filter(public_id="qwen").update(enabled=False)

    run_bootstrap()

    assert CatalogModel.objects.get(public_id="qwen").enabled is True
    assert not Provider.objects.filter(name="demo").exists()


def test_a_broken_freellm_config_stops_start_up_and_changes_nothing(db, settings, tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("providers:\n  - {name: x, kind: nonsense}\n")
    settings.FREELLM_CONFIG = str(config)

    with pytest.raises(ConfigError, match=r"broken\.yaml: providers\[0\]\.kind"):
        run_bootstrap()

    assert not Provider.objects.exists()
    assert not get_user_model().objects.exists()
