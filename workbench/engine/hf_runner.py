"""Reference runner: the Hugging Face forward with a ``DynamicCache`` (correct everywhere, slow on GPU)."""

from __future__ import annotations

import torch


class HFRunner:
    """:class:`workbench.engine.api.Runner` over any ``AutoModelForCausalLM``.

    The KV cache is a ``transformers.DynamicCache``; rollback uses ``DynamicCache.crop``. Logits are
    returned as float32 ``[T, vocab]``. This is the correctness reference the fast engine is tested
    against; its GPU timings are dominated by host overhead (one Python dispatch per op and a growing
    cache), so timings go through :class:`workbench.engine.Engine`.
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.config.vocab_size)
        self.cache = None
        self._length = 0

    def reset(self) -> None:
        self.cache = None
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    @torch.inference_mode()
    def extend(self, tokens: torch.Tensor) -> torch.Tensor:
        from transformers import DynamicCache

        ids = torch.as_tensor(tokens, device=self.device).reshape(1, -1).long()
        if self.cache is None:
            self.cache = DynamicCache(config=self.model.config)
        t = ids.shape[1]
        pos = torch.arange(self._length, self._length + t, device=self.device).unsqueeze(0)
        out = self.model(input_ids=ids, past_key_values=self.cache, position_ids=pos, use_cache=True)
        self.cache = out.past_key_values
        self._length += t
        return out.logits[0].float()

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self._length:
            raise ValueError(f"truncate length {length} outside [0, {self._length}]")
        if length == 0:
            self.reset()
        elif length < self._length:
            self.cache.crop(length - self._length)  # negative: drop that many tokens
            self._length = length

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
