"""One study shape for every technique: ``Config.from_name(size, device=...)`` -> ``run(config, *, model, data,
engine, store)`` -> a result of tidy frames (:mod:`workbench.studies.base` describes the arguments).

* :mod:`workbench.studies.mmlu` -- MMLU in lm-eval's two formulations (notebook 00);
* :mod:`workbench.studies.quant` -- RTN / AWQ / GPTQ and the float formats: memory, fidelity, MMLU, speed (01);
* :mod:`workbench.studies.spec` -- speculative decoding: KL, alpha, tau, speedup against theory (02);
* :mod:`workbench.studies.pd` -- prefill/decode profile, the serving simulator against a real loop, P/D (03);
* :mod:`workbench.studies.stack` -- the 8 combinations, the KV cache, the claims ledger (04).

Nothing below this package imports it: a study imports what it measures.
"""
