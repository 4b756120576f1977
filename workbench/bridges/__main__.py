"""``python -m workbench.bridges {export,import,vllm} ...`` (see :mod:`workbench.bridges.cli`)."""

from workbench.bridges.cli import main

if __name__ == "__main__":
    main()
