"""``triton.runtime.errors`` as in Triton 3.5."""


class TritonError(Exception):
    pass


class PTXASError(TritonError):
    def __init__(self, error_message=None):
        self.error_message = error_message

    def __str__(self):
        return f"PTXAS error: {self.error_message or ''}"
