"""Real receivers on loopback for the notification tests: an SMTP server (aiosmtpd) and an HTTP
webhook receiver whose paths answer 200 (/ok), 500 (/500) or too late (/slow); and Celery run
eagerly, retries included, as the worker would run them."""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller

from config.celery import app as celery_app
from notifications.models import NotificationSettings

SLOW_SECONDS = 2.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Mailbox:
    messages: list = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp_server(settings):
    mailbox = Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=_free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_TIMEOUT = 5
    yield mailbox
    controller.stop()


@dataclass
class Receiver:
    url: str
    received: list = field(default_factory=list)  # (path, body) of every request, answered or not


@pytest.fixture
def webhook_receiver(settings):
    settings.NOTIFICATIONS = {**settings.NOTIFICATIONS, "WEBHOOK_TIMEOUT_SECONDS": 0.5}
    received: list = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's hook name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, body))
            if self.path == "/slow":
                time.sleep(SLOW_SECONDS)
            status = 500 if self.path == "/500" else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            try:
                self.wfile.write(b"ok")
            except OSError:
                pass  # the slow path's client gave up long ago

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Receiver(url=f"http://127.0.0.1:{server.server_port}", received=received)
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def eager_celery():
    before = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    # Not propagating: an eager task's retry is an exception that apply() catches and turns into
    # the next attempt only when it is not propagated, as a worker would.
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = True, False
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = before


def subscribe(user, *events, webhook: str = "", email: bool = False, fmt: str = "generic",
              wait_minutes: int = 60) -> NotificationSettings:
    return NotificationSettings.objects.update_or_create(user=user, defaults={
        "events": list(events), "webhook_url": webhook, "email_enabled": email, "webhook_format": fmt,
        "wait_threshold_minutes": wait_minutes})[0]
