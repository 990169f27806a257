import signal

import pytest

# The signal tests need Ctrl-C to work in this process and in the programs they start. A
# test run started in the background by a non-interactive shell (`make test &`) inherits
# SIGINT ignored, which every child would inherit too: give it Python's usual handler back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# pytester runs small test files in a subprocess pytest (tests/test_pytest_plugin.py).
pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run first: a parallel run (pytest-xdist, ``make test``) hands
    tests out in this order, so the long ones start early instead of keeping one worker
    busy after the others are done."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def dask_cluster():
    """A real Dask LocalCluster (2 worker processes), shared by the tests that need one: its address."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=50)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()
