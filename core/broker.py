"""The embedded Celery broker (no REDIS_URL): kombu's filesystem transport, made safe for several
processes sharing its folders, as the demo's web server, worker and beat do.

kombu 5.7's transport writes a message file in place: `_put` creates it in the queue folder, then
locks and writes it, while a consumer's `_get` lists that folder, moves the file away (a move
ignores the lock) and reads it, possibly still empty; binding a queue creates the exchange's
routing table the same way. A reader that finds either empty raises JSONDecodeError, which stops
a Celery worker ("Unrecoverable error"), kombu issue 1551. Here each file appears whole: written
under a name the readers skip, then renamed (or linked) into place, one atomic step on one
filesystem."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


def _staged(folder: str | Path, data: bytes) -> str:
    """A new file holding `data` in `folder`, named so that no reader of the folder takes it: a
    leading dot leaves nothing after the first dot that ends in `<queue>.msg`."""
    path = os.path.join(folder, f".{uuid.uuid4().hex}.staged")
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError:
        _remove(path)
        raise
    return path


def _remove(path: str | Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue` whole: the message file appears under its name complete."""
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        staged = None
        try:
            staged = _staged(self.data_folder_out, str_to_bytes(dumps(payload)))
            os.replace(staged, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            if staged is not None:
                _remove(staged)
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        """Create the exchange's routing table whole the first time (an empty one, linked into
        place unless another process did it first); kombu's own bind then adds the queue to it
        under its exclusive lock, as readers take theirs."""
        file = self._exchange_file(exchange)
        if not file.exists():
            self.control_folder.mkdir(exist_ok=True)
            try:
                staged = _staged(self.control_folder, str_to_bytes(dumps([])))
            except OSError as exc:
                raise ChannelError(f"Cannot open {file}") from exc
            try:
                os.link(staged, file)
            except FileExistsError:
                pass
            except OSError as exc:
                raise ChannelError(f"Cannot create {file}") from exc
            finally:
                _remove(staged)
        return super()._queue_bind(exchange, routing_key, pattern, queue)


class Transport(filesystem.Transport):
    Channel = Channel
