"""`manage.py rundemo`: the web server, a Celery worker and Celery beat as child processes on the
embedded filesystem broker, with their logs in one terminal. Ctrl-C stops all three.

The children get their own sessions, so the terminal's Ctrl-C reaches only this command, which
then stops them in order (beat first, so nothing new is queued; the web server last) and waits."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from demo.fleet import DEMO_LOGINS

STOP_TIMEOUT_S = 20.0
WEB_START_TIMEOUT_S = 60.0


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    pump: threading.Thread | None = field(default=None, repr=False)


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", addr
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"--addr {addr!r}: expected HOST:PORT or PORT, e.g. 127.0.0.1:8000")
    return host.strip("[]") or "127.0.0.1", int(port)


def demo_login_lines() -> list[str]:
    """One aligned line per demo user: username, password, role (and team)."""

    width = max(len(login.username) for login in DEMO_LOGINS)
    pwidth = max(len(login.password) for login in DEMO_LOGINS)
    return [
        f"{login.username:<{width}}  {login.password:<{pwidth}}  {login.role}"
        + (f" ({login.team})" if login.team else "")
        for login in DEMO_LOGINS
    ]


def ensure_port_free(host: str, port: int) -> None:
    """Refuse early: otherwise the readiness check could be answered by whatever holds the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}; pick another with --addr") from None


class Command(BaseCommand):
    help = "Run Fleetdeck's web server, Celery worker and Celery beat together; Ctrl-C stops all of them."

    def add_arguments(self, parser):
        parser.add_argument(
            "--addr", default="127.0.0.1:8000", help="Web server address, HOST:PORT (default %(default)s)"
        )
        parser.add_argument("--concurrency", type=int, default=2, help="Celery worker processes (default %(default)s)")

    def handle(self, *args, addr: str, concurrency: int, **options) -> None:
        host, port = parse_addr(addr)
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        ensure_port_free(host, port)
        self._prepare_dirs()
        self._stop = threading.Event()
        self._out_lock = threading.Lock()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self._stop.set())
        children = self._children(f"{host}:{port}", concurrency)
        try:
            for child in children:
                self._start(child)
            if self._wait_for_web(host, port, children):
                self._banner(host, port)
            failed = self._watch(children)
        finally:
            self._stop_all(children)
        if failed:
            raise CommandError(f"{failed.name} exited with status {failed.proc.returncode}; stopped the others.")
        self._say("Stopped web server, worker and beat.")

    # --- set-up ---------------------------------------------------------------------------------

    def _prepare_dirs(self) -> None:
        # The broker's folders come from settings; STATIC_ROOT is made here because WhiteNoise warns
        # at start-up when it is missing (the demo serves static files through the finders).
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)

    def _children(self, addr: str, concurrency: int) -> list[Child]:
        python = sys.executable
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        celery = [python, "-m", "celery", "-A", "config"]
        return [
            Child("web", [python, manage, "runserver", addr, "--noreload"]),
            Child("worker", [*celery, "worker", "-l", "info", "--pool=prefork", f"--concurrency={concurrency}",
                             "--hostname=demo@%h"]),
            Child("beat", [*celery, "beat", "-l", "info", "-s", str(settings.CELERY_BEAT_SCHEDULE_FILENAME)]),
        ]

    def _start(self, child: Child) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": os.environ.get(
            "DJANGO_SETTINGS_MODULE", "config.settings"),
            # The demo's nodes are simulated: beat pushes simulated DCGM telemetry for them.
            "DEMO_TELEMETRY": os.environ.get("DEMO_TELEMETRY", "true")}
        child.proc = subprocess.Popen(
            child.argv,
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
            errors="replace",
        )
        child.pump = threading.Thread(target=self._pump, args=(child,), daemon=True)
        child.pump.start()
        self._say(f"started {child.name} (pid {child.proc.pid}): {' '.join(child.argv[1:])}")

    def _pump(self, child: Child) -> None:
        prefix = f"[{child.name:<6}] "
        for line in child.proc.stdout:
            with self._out_lock:
                self.stdout.write(prefix + line.rstrip("\n"))
                self.stdout.flush()

    def _say(self, text: str) -> None:
        with self._out_lock:
            self.stdout.write(self.style.SUCCESS(f"[rundemo] {text}"))
            self.stdout.flush()

    # --- running --------------------------------------------------------------------------------

    def _wait_for_web(self, host: str, port: int, children: list[Child]) -> bool:
        target = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        deadline = time.monotonic() + WEB_START_TIMEOUT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            if any(c.proc.poll() is not None for c in children):
                return False
            try:
                with socket.create_connection((target, port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.3)
        return False

    def _banner(self, host: str, port: int) -> None:
        shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
        lines = ["", f"Fleetdeck is running at http://{shown}:{port}/", ""]
        lines += ["Demo logins (username  password  role):", *("  " + line for line in demo_login_lines()), ""]
        lines.append("Press Ctrl-C to stop the web server, worker and beat.")
        with self._out_lock:
            self.stdout.write(self.style.SUCCESS("\n".join(lines)))
            self.stdout.flush()

    def _watch(self, children: list[Child]) -> Child | None:
        """Block until a stop signal (None) or a child exiting on its own (that child)."""
        while not self._stop.wait(0.5):
            for child in children:
                if child.proc.poll() is not None:
                    return child
        return None

    def _stop_all(self, children: list[Child]) -> None:
        running = [c for c in reversed(children) if c.proc is not None and c.proc.poll() is None]
        for child in running:
            self._say(f"stopping {child.name} (pid {child.proc.pid})")
            child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in running:
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._say(f"{child.name} did not stop in {STOP_TIMEOUT_S:.0f} s; killing it")
                os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        for child in children:
            if child.pump is not None:
                child.pump.join(timeout=2)
