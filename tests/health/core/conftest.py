from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def xid_dir(shared_dir: Path) -> Path:
    return shared_dir / "telemetry" / "xid"


@pytest.fixture(scope="session")
def dcgm_dir(shared_dir: Path) -> Path:
    return shared_dir / "telemetry" / "dcgm"
