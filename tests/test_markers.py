"""tests/conftest.py's marker hook: model-loading tests are ``slow``; only notebook items are retried."""

import pytest


def _conftest(request):
    for plugin in request.config.pluginmanager.get_plugins():
        if hasattr(plugin, "MODEL_FIXTURES") and hasattr(plugin, "pytest_collection_modifyitems"):
            return plugin
    pytest.fail("tests/conftest.py (with MODEL_FIXTURES) is not loaded")


class FakeItem:
    def __init__(self, path, fixturenames=()):
        self.path, self.fixturenames, self.own_markers = path, list(fixturenames), []

    def add_marker(self, m):
        self.own_markers.append(getattr(m, "mark", m))

    def get_closest_marker(self, name):
        return next((m for m in self.own_markers if m.name == name), None)


def test_hook_marks_model_tests_slow_and_notebooks_flaky(request):
    hook = _conftest(request).pytest_collection_modifyitems
    model, plain, nb = FakeItem("tests/x.py", ["default_model", "tmp_path"]), FakeItem("tests/y.py"), FakeItem("n/00.ipynb")
    hook(request.config, [model, plain, nb])
    assert [m.name for m in model.own_markers] == ["slow"]
    assert plain.own_markers == []  # a unit test is never retried
    assert [(m.name, m.kwargs) for m in nb.own_markers] == [("flaky", {"reruns": 2})]


def test_every_collected_model_test_is_slow(request):
    # in a full run (make test) this sees every item: without the hook, 7 of the 9 tests that load the
    # built-in model had no slow marker and `make test-fast` loaded it
    items = [i for i in request.session.items if "default_model" in getattr(i, "fixturenames", ())]
    if not items:
        pytest.skip("no test using default_model was collected in this session")
    assert all(i.get_closest_marker("slow") for i in items)
    for i in request.session.items:
        if str(getattr(i, "path", "")).endswith(".ipynb"):
            assert i.get_closest_marker("flaky").kwargs == {"reruns": 2}
        elif i.get_closest_marker("flaky") is not None:
            pytest.fail(f"{i.nodeid} is retried but is not a notebook")
