"""Without AIConfigurator every prediction call says how to install it (runs whether or not it is installed)."""

import builtins

import pytest

from workbench.predict import INSTALL_HINT, PredictUnavailableError, predict, systems


@pytest.fixture
def no_aiconfigurator(monkeypatch):
    real = builtins.__import__

    def fake(name, *a, **kw):
        if name.startswith("aiconfigurator"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake)


@pytest.mark.parametrize("call", [lambda: predict("llama3-8b", "h200_sxm"), systems])
def test_absence_names_the_install(no_aiconfigurator, call):
    with pytest.raises(PredictUnavailableError, match=r"pip install 'aiconfigurator==0\.12\.0'") as e:
        call()
    assert isinstance(e.value, ImportError) and INSTALL_HINT in str(e.value)
