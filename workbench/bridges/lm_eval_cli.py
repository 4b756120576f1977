"""``workbench-lm-eval``: lm-eval's own command line with ``--model workbench`` registered.

lm-eval 0.4.13 has no model plugin mechanism, so this entry point (``pyproject.toml``
``[project.scripts]``; or ``python -m workbench.bridges.lm_eval_cli``) imports
:mod:`workbench.bridges.lm_eval_model`, whose import registers the model, and hands ``sys.argv`` to
``lm_eval.__main__.cli_evaluate`` unchanged: every lm-eval flag works as with ``lm_eval``.
"""

from lm_eval.__main__ import cli_evaluate

from workbench.bridges.lm_eval_model import WorkbenchLM  # noqa: F401 - importing it registers the model

__all__ = ["main"]


def main() -> None:
    """Run lm-eval's CLI (``lm_eval run ...`` or the legacy ``lm_eval --model ...`` form)."""
    cli_evaluate()


if __name__ == "__main__":
    main()
