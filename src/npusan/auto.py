"""``import npusan.auto``: record this process as the environment says.

With ``NPUSAN_TRACE=PATH`` (and/or ``NPUSAN_ONLINE=raise|warn``) set, importing this module
starts recording now if torch is already imported, else right after torch is imported.
It is what ``npusan record``'s start-up hook runs in every Python process; put it at the
top of a program to record without the wrapper. See :mod:`npusan.recorder.activate`.
"""

from .recorder.activate import autostart

autostart()
