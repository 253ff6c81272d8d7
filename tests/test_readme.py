"""The README stays true: every runtime setting and environment variable is documented there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gateway.config import apply_config
from gateway.models import Provider
from gateway.settings_registry import SETTINGS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def table_rows(heading: str) -> dict[str, list[str]]:
    section = README.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_runtime_setting_is_documented_with_its_default():
    rows = table_rows("Runtime settings")

    assert set(rows) == set(SETTINGS)
    for name, spec in SETTINGS.items():
        assert rows[name][0] == f"`{json.dumps(spec.default)}`", name
        assert rows[name][1] == spec.doc, name


def test_every_environment_variable_the_settings_read_is_documented():
    settings_source = (ROOT / "freellm_site" / "settings.py").read_text()
    read = set(re.findall(r'env\.\w+\("([A-Z_]+)"', settings_source))
    read |= set(re.findall(r'os\.environ\.get\("([A-Z_]+)"', settings_source))

    assert read
    assert read <= set(table_rows("Environment variables"))


@pytest.mark.django_db
def test_the_yaml_example_applies_as_it_stands(tmp_path, monkeypatch):
    block = re.search(r"```yaml\n(providers:.*?)```", README, re.DOTALL)
    assert block, "the README's YAML example is gone"
    for variable in set(re.findall(r"env:([A-Z_]+)", block.group(1))):
        monkeypatch.setenv(variable, f"sk-example-{variable.lower()}-0123456789")
    path = tmp_path / "example.yaml"
    path.write_text(block.group(1))

    apply_config(path)

    assert set(Provider.objects.values_list("name", "kind")) == {
        ("groq", "openai"),
        ("google", "gemini"),
        ("claude", "anthropic"),
    }
