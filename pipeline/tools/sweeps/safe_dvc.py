"""`dvc`, with kombu's filesystem transport writing each broker message whole.

DVC's queue runs on celery with kombu's filesystem transport: a message is a file in the broker
folder. kombu writes one by creating the file under its final name, then locking it, then
writing; a consumer lists the folder, moves the file away and reads it without a lock. A worker
that polls while another process queues an experiment can therefore read an empty message, and
celery stops it: "Unrecoverable error: JSONDecodeError('Expecting value: line 1 column 1 (char
0)')" (treeverse/dvc#7903, celery/kombu#1551, open). Here queue workers died so in three of four
starts, mid-experiment, and the message they read is gone with them.

`atomic_put` writes the message to a temporary name that no queue matches (a leading dot) and
renames it into place: a reader sees the whole message or none. `main` installs it and runs DVC's
own command line; the `dvc` of `shim/` runs it, and tool_env puts that first on PATH for every
process a table's queue starts.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from time import monotonic
from typing import Any


def atomic_put(self: Any, queue: str, payload: Any, **kwargs: Any) -> None:
    """kombu's filesystem `Channel._put`, its file written whole before it gets its name."""
    from kombu.exceptions import ChannelError
    from kombu.utils.encoding import str_to_bytes
    from kombu.utils.json import dumps

    name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"  # as kombu names it
    final = os.path.join(self.data_folder_out, name)
    partial = os.path.join(self.data_folder_out, f".{uuid.uuid4().hex}.partial")  # no queue's
    try:
        with open(partial, "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(partial, final)
    except OSError as exc:
        with contextlib.suppress(OSError):  # not made, or renamed: none of ours is left there
            os.remove(partial)
        raise ChannelError(f"Cannot add file {final!r} to directory") from exc


def install() -> None:
    """Make kombu's filesystem transport use `atomic_put` in this process."""
    from kombu.transport import filesystem

    filesystem.Channel._put = atomic_put


def main(argv: list[str] | None = None) -> int:
    install()
    from dvc.cli import main as dvc_main

    return dvc_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
