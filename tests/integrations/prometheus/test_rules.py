"""The shipped Prometheus rules and Alertmanager snippet load in the real tools, and the rules' unit
tests (rules/fleetdeck-rules.test.yml: input series in, recorded series and alerts out) pass."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.conftest import missing_service

from .servers import AM_SNIPPET, RULES, binaries


@pytest.fixture
def tools() -> dict[str, str]:
    found = binaries()
    if found is None:
        missing_service("promtool and amtool (Debian packages prometheus, prometheus-alertmanager)")
    return found


def _run(*args: str, cwd=None) -> str:
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_promtool_check_rules_accepts_the_rules_file(tools):
    assert "SUCCESS: 13 rules found" in _run(tools["promtool"], "check", "rules", str(RULES))


def test_the_rules_unit_tests_pass(tools):
    assert "SUCCESS" in _run(tools["promtool"], "test", "rules", "fleetdeck-rules.test.yml", cwd=RULES.parent)


def test_every_alert_names_a_signal_the_webhook_acts_on():
    from integrations.prometheus.alerts_in import EXPORTER_DOWN, KINDS

    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    assert {rule["labels"]["fleetdeck_signal"] for rule in alerts} == {*KINDS, EXPORTER_DOWN}


def test_amtool_accepts_the_alertmanager_snippet(tools, tmp_path):
    config = yaml.safe_load(AM_SNIPPET.read_text())
    token = tmp_path / "token"
    token.write_text("t")
    config["receivers"][1]["webhook_configs"][0]["http_config"]["authorization"]["credentials_file"] = str(token)
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))

    assert "SUCCESS" in _run(tools["amtool"], "check-config", str(path))
