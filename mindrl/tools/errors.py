"""What a tool raises to answer the model with an error or a timeout instead of a result."""


class ToolError(Exception):
    """The call failed in a way the model should read: answered as `error: <message>`."""


class ToolTimeout(Exception):
    """The call ran past its deadline: answered as `timeout after N s`."""


class SandboxUnavailable(RuntimeError):
    """strict mode, and a sandbox layer cannot be set up on this machine (named)."""
