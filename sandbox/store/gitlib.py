"""Loading pygit2 in a command's process without parsing the system's CA bundle, twice.

Importing pygit2 initialises libgit2, whose OpenSSL set-up loads the default certificate file
(``SSL_CTX_set_default_verify_paths``), and then pygit2 hands libgit2 the same file again
(``settings.set_ssl_cert_locations``): two parses of ``/etc/ssl/certs/ca-certificates.crt``, about
105M instructions (~25 ms) of the ~410M its import costs, a tenth of every command that reads the
repository (measured with callgrind: docs/design.md "The commands' start"). The sandbox never speaks
TLS through libgit2 (``push`` and ``fetch`` run git itself: :mod:`sandbox.store.gitcli`).

The commands' entry point installs :func:`install` before anything is imported: the first
``import pygit2`` of the process, wherever it happens (a command that answers without pygit2 never
pays for it), runs with ``SSL_CERT_FILE`` naming an empty file for the length of that import only, so
libgit2 in the process trusts no certificate authority (a TLS connection through it would fail, never
pass unchecked). The environment is changed only while the process has one thread (a child started
meanwhile by another thread would inherit it); with more, pygit2 loads as it always does. Either way
children see what the user set. A library caller that imports pygit2 itself gets pygit2's own behaviour.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

#: The variable OpenSSL and Python's ``ssl.get_default_verify_paths`` read for the CA file.
CA_FILE_VARIABLE = "SSL_CERT_FILE"


def install() -> None:
    """Make the process's first ``import pygit2`` skip the CA bundle (see the module); cheap, imports nothing."""
    if "pygit2" not in sys.modules and not any(isinstance(f, _FirstImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _FirstImport())


def _alone() -> bool:
    """This process runs one thread (``threading`` never imported, or it counts one)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


class _FirstImport:
    """A finder that answers only the first ``import pygit2``, then leaves ``sys.meta_path``."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != "pygit2":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(name)  # by the finders that remain
        if spec is not None and spec.loader is not None and _alone():
            spec.loader = _WithoutCABundle(spec.loader)  # type: ignore[assignment]  # a Loader by protocol
        return spec


class _WithoutCABundle:
    """pygit2's own loader, its module executed with no CA file to parse; the environment as it was after."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        before = os.environ.get(CA_FILE_VARIABLE)
        os.environ[CA_FILE_VARIABLE] = os.devnull
        try:
            self.loader.exec_module(module)
        finally:
            if before is None:
                del os.environ[CA_FILE_VARIABLE]
            else:
                os.environ[CA_FILE_VARIABLE] = before
            module.__loader__ = self.loader  # pygit2's own from now on
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
