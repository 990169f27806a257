# pytester runs small test files in a subprocess pytest (tests/test_pytest_plugin.py).
pytest_plugins = ["pytester"]
