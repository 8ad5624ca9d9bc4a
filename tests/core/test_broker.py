"""The embedded broker (core.broker, the demo's: no REDIS_URL) when the web server, the worker and
the beat share its folders: a consumer never reads a message, and a process never reads a queue's
routing table, that another process is still writing. Each test stops the writer between creating
its file and writing it, as a slow disk or a descheduled process does, and lets the other side act
there; kombu's own filesystem transport fails both with JSONDecodeError (the worker's
"Unrecoverable error")."""

from __future__ import annotations

import builtins
import io
from contextlib import contextmanager
from pathlib import Path

import pytest
from kombu import Connection
from kombu.transport.virtual import BrokerState

from core.broker import Transport


def _connection(tmp_path: Path, transport=Transport) -> Connection:
    folders = {"data_folder_in": tmp_path / "queue", "data_folder_out": tmp_path / "queue",
               "control_folder": tmp_path / "control"}
    for folder in folders.values():
        folder.mkdir(exist_ok=True)
    options = {name: str(folder) for name, folder in folders.items()}
    connection = Connection("filesystem://", transport=transport,
                            transport_options={**options, "store_processed": False})
    # What the queues and bindings declared are, kombu keeps per process: each connection here
    # stands for a process of its own (web, worker, beat).
    connection.transport.state = BrokerState()
    return connection


@contextmanager
def paused_writes(folder: Path, meanwhile):
    """Run `meanwhile()` whenever a file in `folder` has just been opened for writing, before a
    byte is written to it (once at a time: what it writes itself is not paused)."""
    real_open, busy = builtins.open, []

    def open_then_wait(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if "w" in mode and Path(file).parent == folder and not busy:
            busy.append(file)
            try:
                meanwhile()
            finally:
                busy.pop()
        return f

    # pathlib opens through io.open, everything else through the builtin: both are the same function.
    builtins.open = io.open = open_then_wait
    try:
        yield
    finally:
        builtins.open = io.open = real_open


def test_a_consumer_never_receives_a_message_still_being_written(tmp_path):
    with _connection(tmp_path) as producer, _connection(tmp_path) as consumer:
        outbox, inbox = producer.SimpleQueue("rounds"), consumer.SimpleQueue("rounds")
        seen_while_writing = []

        def consumer_polls():
            try:
                seen_while_writing.append(inbox.get(block=False).payload)
            except inbox.Empty:
                seen_while_writing.append(None)

        with paused_writes(tmp_path / "queue", consumer_polls):
            outbox.put({"round": 1})
        message = inbox.get(block=False)

        assert seen_while_writing == [None]  # not there yet, rather than there and empty
        assert message.payload == {"round": 1}
        message.ack()
        with pytest.raises(inbox.Empty):
            inbox.get(block=False)


def test_processes_declaring_the_same_queue_at_once_share_one_whole_routing_table(tmp_path):
    with _connection(tmp_path) as web, _connection(tmp_path) as worker:
        declared = []
        with paused_writes(tmp_path / "control", lambda: declared.append(worker.SimpleQueue("rounds"))):
            outbox = web.SimpleQueue("rounds")
        outbox.put({"round": 2})
        message = declared[0].get(block=False)

        assert message.payload == {"round": 2}
        message.ack()
