"""Error types shared by the layout core, the CLI and the launcher.

``BadInput`` is anything a user typed or supplied that can never work as given
(exit code 1 in the CLI). A layout that is well-formed but cannot be served by
the chosen SGLang version or backend is not an exception: the compatibility
check returns it as a list of problems.
"""


class AscendPDError(Exception):
    """Base class of every error this package raises on purpose."""


class BadInput(AscendPDError, ValueError):
    """Input that breaks a rule; the message names the field, the value and the rule."""


class ModelConfigError(BadInput):
    """A model ``config.json`` that cannot be turned into model facts."""


class LayoutMismatch(AscendPDError):
    """Two sides disagree about the KV layout; transferring would misplace KV."""


class ContractMismatch(AscendPDError):
    """The operator wrote another version of the env contract than the launcher or the
    inspector speaks."""


class SGLangVersionMismatch(AscendPDError):
    """The SGLang installed in the image does not follow the KV layout rules of the version
    the spec names (``sglang_version``)."""
