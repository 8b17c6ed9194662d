"""Loading pygit2 in a command's process without parsing the system's CA bundle, twice.

Importing pygit2 initialises libgit2, whose OpenSSL set-up loads the default certificate file
(``SSL_CTX_set_default_verify_paths``), and then pygit2 hands libgit2 the same file again
(``settings.set_ssl_cert_locations``): two parses of ``/etc/ssl/certs/ca-certificates.crt``, about
105M instructions (~25 ms) of the ~410M its import costs, a tenth of every command that reads the
repository (measured with callgrind: docs/design.md "The commands' start"). The sandbox never speaks TLS through
libgit2 (``push`` and ``fetch`` run git itself: :mod:`sandbox.store.gitcli`), so the click commands'
entry point loads pygit2 here first, with ``SSL_CERT_FILE`` naming an empty file for the length of
the import; libgit2 in this process then trusts no certificate authority (a TLS connection through
it would fail, never pass unchecked). The environment is put back before anything else runs: the
entry point calls this while it is the process's only thread, and children see what the user set.

A library caller that imports pygit2 itself gets pygit2's own behaviour; so does a process in which
pygit2 was already imported.
"""

from __future__ import annotations

import os
import sys

#: The variable OpenSSL and Python's ``ssl.get_default_verify_paths`` read for the CA file.
CA_FILE_VARIABLE = "SSL_CERT_FILE"


def load_without_ca_bundle() -> None:
    """Import pygit2 with no CA file to parse; the environment as it was afterwards."""
    if "pygit2" in sys.modules:
        return
    before = os.environ.get(CA_FILE_VARIABLE)
    os.environ[CA_FILE_VARIABLE] = os.devnull
    try:
        import pygit2  # noqa: F401
    finally:
        if before is None:
            del os.environ[CA_FILE_VARIABLE]
        else:
            os.environ[CA_FILE_VARIABLE] = before
