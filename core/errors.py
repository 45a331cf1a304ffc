"""Typed errors at the boundaries.

Every :class:`SpecplanError` is a user-facing problem (bad input): the CLI prints its
message on one line and exits with code 2. Messages say what to change.
"""


class SpecplanError(Exception):
    """Bad input from the user; the CLI turns it into one line on stderr and exit 2."""


class ProfileError(SpecplanError):
    """A profile.yaml that is malformed, of another schema, or from another device."""


class PlanError(SpecplanError):
    """A plan.yaml that is malformed or names something the profile lacks."""


class ModelError(SpecplanError):
    """A model that cannot be found or loaded."""


class DrafterSpecError(SpecplanError):
    """A drafter spec (``--drafter``) that is not understood."""


class PromptError(SpecplanError):
    """An empty or unreadable prompt / prompts file."""


class TreeError(SpecplanError):
    """A tree shape that is not a tree (cycle, parent after child, empty budget)."""


class BackendMissingError(SpecplanError):
    """An optional backend (bitsandbytes, gptqmodel, matplotlib) is not installed."""


class OutputError(SpecplanError):
    """An output location that cannot be written (a folder, no permission, a full disk, an input)."""


class CacheError(SpecplanError):
    """A cache folder that cannot be read or written, or a cache entry that cannot be found."""


class SettingError(SpecplanError):
    """A published-setting file (``specplan predict``) that is malformed or names an unknown SKU, shape or precision."""
