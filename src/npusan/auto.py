"""``import npusan.auto``: record this process as the environment says.

With ``NPUSAN_TRACE=PATH`` (and/or ``NPUSAN_ONLINE=raise|warn``) set, importing this module
starts recording now if torch is already imported, else right after torch is imported.
It is what ``npusan record``'s start-up hook runs in every Python process; put it at the
top of a program to record without the wrapper. With neither variable set it records
nothing, and says so in one line on stderr. See :mod:`npusan.recorder.activate`.
"""

import os
import sys

from .recorder.activate import DISABLE_ENV, autostart

if not (os.environ.get("NPUSAN_TRACE") or os.environ.get("NPUSAN_ONLINE")) and os.environ.get(
    DISABLE_ENV, "0"
) in ("", "0"):
    sys.stderr.write(
        "npusan: warning: import npusan.auto: NPUSAN_TRACE is not set; nothing is recorded "
        "(run with NPUSAN_TRACE=trace.npusan)\n"
    )

autostart()
