"""Engine tests: on a machine without a GPU, run Triton kernels through Triton's CPU interpreter.

The variable must be set before ``triton`` is first imported (other imports such as transformers may
pull it in), hence here rather than in the kernel test module.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
