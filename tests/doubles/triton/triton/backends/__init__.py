from . import compiler, nvidia  # noqa: F401
