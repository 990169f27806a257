"""Imported at start-up by every Python process whose PYTHONPATH starts with this directory
(set by ``npusan record``). Runs any other ``sitecustomize`` that this one shadows, then
arms npusan's recorder (it starts when the process imports torch)."""


def _chain() -> None:
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.path[:]
    mod = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.loader is not None and spec.origin != __file__:
            other = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(other)
    except Exception:
        pass
    finally:
        sys.path[:] = saved
        if mod is not None:
            sys.modules["sitecustomize"] = mod


def _arm() -> None:
    try:
        from npusan.recorder.activate import autostart
    except Exception as e:  # npusan is not importable by this interpreter
        import sys

        sys.stderr.write(f"npusan: warning: this Python cannot import npusan ({e}); not recording\n")
        return
    autostart()


_chain()
_arm()
