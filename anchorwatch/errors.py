"""The root of anchorwatch's own exceptions: the CLI turns these into a clear message and a
non-zero exit instead of a traceback."""


class AnchorwatchError(Exception):
    """Something the operator can act on; the message says what and, where possible, how."""
