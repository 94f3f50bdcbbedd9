"""The project's own errors: each names the bad input (file, key, host) and what to do.

Every error the pipeline raises on purpose derives from `PipelineError` (and from the builtin it
refines, so `except ValueError` still catches a bad value). A stage catches `PipelineError` and
prints `error: <message>` with exit status 2, and no traceback; anything else is a bug and keeps
its traceback."""


class PipelineError(Exception):
    pass
