"""The one user-facing error type: the CLI prints its message and exits with code 2."""


class UserError(Exception):
    """Bad input (config key, file, data line): message says what and what is allowed."""

    exit_code = 2


class WorkerError(RuntimeError):
    """A worker process died or stopped answering; measured iterations are kept."""

    exit_code = 3
