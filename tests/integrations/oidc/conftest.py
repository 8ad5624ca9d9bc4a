"""A real OIDC provider process on loopback (django-oauth-toolkit, provider/), started once per
test session and worker, with Fleetdeck registered as its client; and Fleetdeck's settings
pointed at it. Users are made at the provider with `provider.user(name, *groups)`."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[3]
CLIENT_ID = "fleetdeck"
CLIENT_SECRET = "fleetdeck-test-client-secret"
GROUP_ROLES = {"gpu-operators": "operator", "gpu-viewers": "viewer"}
GROUP_TEAMS = {"team-research": "research", "team-product": "product"}


@dataclass
class Provider:
    issuer: str
    env: dict
    process: subprocess.Popen

    def manage(self, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "django", *args], env=self.env, cwd=REPO, check=True,
                       capture_output=True, timeout=60)

    def user(self, username: str, *groups: str) -> None:
        self.manage("provider_user", username, *groups)


@pytest.fixture(scope="session")
def oidc_provider(live_server, tmp_path_factory):
    port = free_port()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    issuer = f"http://127.0.0.1:{port}/o"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))},
           "DJANGO_SETTINGS_MODULE": "tests.integrations.oidc.provider.settings",
           "OIDC_PROVIDER_DB": str(tmp_path_factory.mktemp("oidc-provider") / "provider.sqlite3"),
           "OIDC_PROVIDER_RSA_KEY": key, "OIDC_PROVIDER_ISSUER": issuer, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "django", "migrate", "--noinput"], env=env, cwd=REPO, check=True,
                   capture_output=True, timeout=120)
    subprocess.run([sys.executable, "-m", "django", "provider_client", "--client-id", CLIENT_ID, "--client-secret",
                    CLIENT_SECRET, "--redirect-uri", f"{live_server.url}/oidc/callback/"],
                   env=env, cwd=REPO, check=True, capture_output=True, timeout=60)
    log = open(tmp_path_factory.getbasetemp() / f"oidc-provider-{port}.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "django", "runserver", "--noreload", "--skip-checks",
                                f"127.0.0.1:{port}"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(f"{issuer}/.well-known/openid-configuration", process)
        yield Provider(issuer=issuer, env=env, process=process)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _wait_for(url: str, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the OIDC provider exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the OIDC provider did not answer {url} within {timeout} s")


@pytest.fixture
def sso(oidc_provider, settings) -> Provider:
    """Fleetdeck configured for the provider, as the environment would (OIDC_ISSUER_URL & co.)."""
    settings.OIDC_ISSUER_URL = oidc_provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_GROUP_ROLES = GROUP_ROLES
    settings.OIDC_GROUP_TEAMS = GROUP_TEAMS
    settings.AUTHENTICATION_BACKENDS = ["accounts.oidc.OIDCBackend", "django.contrib.auth.backends.ModelBackend"]
    return oidc_provider
