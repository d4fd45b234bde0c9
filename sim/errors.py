"""The one exception users see: a bad input, named by its config field and value.

Three failure modes exist in Fleetcast (docs/explanation/architecture.md, Conventions): bad input
raises ``ConfigError`` at the boundary, an expected shortage (no free KV blocks now) returns
``None``, and a broken invariant is an ``AssertionError`` with a message. Only the first is meant
for users, so the CLI prints it as a single line and exits non-zero.
"""


class ConfigError(ValueError):
    """A config field holds a value the simulator cannot use.

    ``str(err)`` is one line: ``field=value: reason``.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")

    def __reduce__(self) -> tuple:
        # rebuilt from its three parts when it crosses a process boundary (a worker's error)
        return (ConfigError, (self.field, self.value, self.reason))


def require(condition: bool, field: str, value: object, reason: str) -> None:
    """Raise ``ConfigError(field, value, reason)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(field, value, reason)
