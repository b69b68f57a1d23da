"""The native engine (the compiled kvfabric._native), loaded under this name.

A wheel carries every library kvfabric links except libfabric, which must be
the system's (the one the EFA installer or the distribution provides, shared
with NCCL's plugin in the same process). Where it is missing, the import
fails with what to install instead of the loader's bare message.

Debian's and Ubuntu's libfabric loads libinfinipath, which installs handlers
that exit(1) on SIGTERM, SIGINT and crashes unless IPATH_NO_BACKTRACE is set
when it loads: set here, before the native module loads it, so that the
interpreter's and the application's handlers stay in place.
"""

import os
import sys

os.environ.setdefault("IPATH_NO_BACKTRACE", "1")

try:
    from . import _native
except ImportError as e:  # the loader's message names the missing library
    if "libfabric" not in str(e):
        raise
    raise ImportError(
        f"kvfabric cannot load libfabric ({e}). kvfabric uses the system's libfabric, 1.17 or newer, and does "
        "not carry one: on EFA hosts install the EFA installer and put /opt/amazon/efa/lib on the library path "
        "(export LD_LIBRARY_PATH=/opt/amazon/efa/lib:$LD_LIBRARY_PATH); elsewhere install the distribution's "
        "package (Debian, Ubuntu: apt install libfabric1; RHEL, Amazon Linux: dnf install libfabric). "
        "docs/troubleshooting.md, 'libfabric not found'."
    ) from None

sys.modules[__name__] = _native
