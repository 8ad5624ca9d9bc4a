"""The group mappings are read strictly: a malformed item stops start-up naming the variable."""
from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_map


def test_a_mapping_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("OIDC_GROUP_TEAMS", "team-research=research, team-product = product")
    assert env_map("OIDC_GROUP_TEAMS") == {"team-research": "research", "team-product": "product"}


def test_an_item_without_a_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("OIDC_GROUP_ROLES", "gpu-operators=operator,gpu-viewers")
    with pytest.raises(ImproperlyConfigured, match="OIDC_GROUP_ROLES: 'gpu-viewers' is not KEY=VALUE"):
        env_map("OIDC_GROUP_ROLES")
