"""`manage.py rundemo` (what `make demo` ends with): web, worker and beat on the embedded broker.

Runs the real command in a throwaway var/ folder, proves a Celery task makes the round trip
through the filesystem broker, then Ctrl-C (SIGINT) must stop every child."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PING = (
    "import django; django.setup()\n"
    "from core.tasks import ping\n"
    "print(ping.delay().get(timeout=60))\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def demo_env(var_dir: Path) -> dict[str, str]:
    """The laptop set-up: no DATABASE_URL / REDIS_URL, so SQLite and the filesystem broker."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    return {**env, "FLEETDECK_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "config.settings"}


def test_rundemo_runs_web_worker_and_beat_and_stops_them_on_ctrl_c(tmp_path):
    env = demo_env(tmp_path)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True, timeout=300)
    port = free_port()
    demo = subprocess.Popen(
        [*manage, "rundemo", "--addr", f"127.0.0.1:{port}", "--concurrency", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in demo.stdout:
            lines.append(line)
            if "is running at" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(120), "rundemo never announced its URL:\n" + "".join(lines)
        pong = subprocess.run([sys.executable, "-c", PING], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert pong.stdout.strip() == "pong", pong.stderr + "".join(lines)
        opener = urllib.request.build_opener(NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(f"http://127.0.0.1:{port}/", timeout=10)
        assert redirect.value.code == 302 and "/login/" in redirect.value.headers["Location"]
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)
        reader.join(timeout=5)
    output = "".join(lines)
    assert demo.returncode == 0, output
    assert "Stopped web server, worker and beat." in output
    assert re.search(r"\[worker\].*Task core\.ping\[[0-9a-f-]+\] succeeded", output), output
    pids = re.findall(r"started (?:web|worker|beat) \(pid (\d+)\)", output)
    assert len(pids) == 3, output
    for pid in pids:
        # Each child leads its own process group: the group gone means the worker's pool went too.
        with pytest.raises(ProcessLookupError):
            os.killpg(int(pid), 0)
    assert "No directory at" not in output, "WhiteNoise warned about a missing STATIC_ROOT"
