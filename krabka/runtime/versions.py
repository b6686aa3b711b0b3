"""The versions of a dependency a module was tested with, and the import-time check.

`krabka.kafka` (and the worker, for faust-streaming) use internals of
their dependency beyond its public API. A release the suite did not run against
may rename them or change what they mean, and fail far from the cause: so the
module that relies on them refuses, at import, a version outside the tested
range, unless the user sets the named environment variable to ``1`` (then it
warns). Version strings are compared by PEP 440 with `packaging`, the
implementation pip itself uses; a pre-release is never a tested version.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from krabka.errors import UntestedVersionError

__all__ = ["DISTRIBUTION", "DependencyRange", "UntestedVersionWarning", "installed_version"]

DISTRIBUTION = "krabka-coordination"
"""The distribution this library is installed as."""


def installed_version() -> str:
    """The installed distribution's version; a checkout run without installing has none."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


class UntestedVersionWarning(UserWarning):
    """An untested dependency version was allowed by its override variable."""


@dataclass(frozen=True)
class DependencyRange:
    """`distribution` in the versions `specifier` allows, e.g. ``">=0.14.0,<0.15"``.

    The same specifier is the distribution's requirement in ``pyproject.toml``
    (a unit test holds the two together), so pip installs only what the import
    accepts.
    """

    distribution: str
    specifier: str
    override: str
    """The environment variable that, set to ``1``, allows any version with a warning."""

    @property
    def requirement(self) -> str:
        """The requirement as ``pyproject.toml`` states it, e.g. ``aiokafka>=0.14.0,<0.15``."""
        return f"{self.distribution}{self.specifier}"

    def covers(self, version: str) -> bool:
        """Whether `version` is one the suite was run against."""
        try:
            parsed = Version(version)
        except InvalidVersion:
            return False
        return SpecifierSet(self.specifier).contains(parsed, prereleases=False)

    def require(self, version: str, environ: Mapping[str, str] = os.environ) -> None:
        """Refuse `version` unless it is tested or the override is set (then warn)."""
        if self.covers(version):
            return
        message = (
            f"{self.distribution} {version} is installed, but this project was tested with "
            f"{self.requirement} and uses internals of it that another version may change. "
            f"Install a tested version (pip install '{self.requirement}'), or set "
            f"{self.override}=1 to run with {version} anyway "
            f"(docs/decisions/0006-packaging-and-dependency-versions.md)"
        )
        if environ.get(self.override) == "1":
            warnings.warn(message, UntestedVersionWarning, stacklevel=3)
            return
        raise UntestedVersionError(message, name=self.distribution)
