"""The project's own errors: each names the bad input (file, key, host) and what to do.

Every error the pipeline raises on purpose derives from `PipelineError` (and from the builtin it
refines, so `except ValueError` still catches a bad value). A stage catches `PipelineError` and
prints `error: <message>` with exit status 2, and no traceback; anything else is a bug and keeps
its traceback."""

import re
import sys


class PipelineError(Exception):
    pass


# What a message must not carry to a terminal: C0/C1 control characters other than newline and
# tab (an ESC sequence from a file can clear or retitle the reader's terminal) and the
# bidirectional overrides that reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """`text` with control characters escaped (`\\x1b`, `\\u202e`), newlines and tabs kept."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))


def print_error(message: object) -> None:
    """`error: <message>` on stderr, control characters escaped: what a stage prints for a
    PipelineError, instead of a traceback."""
    print(f"error: {printable(message)}", file=sys.stderr)
