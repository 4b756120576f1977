"""Predictions for hardware that is not here: NVIDIA Dynamo's AIConfigurator estimates, labelled as predictions.

The workbench measures the device it runs on; users ask what a model would do on an H100, H200, B200 or L40S
in vLLM, SGLang or TensorRT-LLM. AIConfigurator (PyPI ``aiconfigurator`` 0.12.0, optional: ``pip install -e
'.[predict]'``) ships kernel tables measured on those systems and estimates TTFT and TPOT per deployment.
This package calls its Python API and returns tidy frames, every row labelled ``"predicted for <system> in
<engine>"``; without the package every call raises :class:`PredictUnavailableError` naming the install.

Validation against the workbench's own measurements: ``benchmarks/predict_validate.py`` (engine step times
on a lent GPU, and the serving simulator, against AIConfigurator for the same shapes and deployments).
AIConfigurator has no CPU systems: the workbench's CPU runs (and vLLM on the CPU) cannot be compared.
"""

from workbench.predict.aic import INSTALL_HINT, PredictUnavailableError, available, model_path
from workbench.predict.claims import claim_predictions
from workbench.predict.estimate import predict, recommend, step_costs
from workbench.predict.plots import plot_batch1, plot_steps
from workbench.predict.systems import ENGINES, PRECISION_ALIASES, STAND_INS, StandIn, systems
from workbench.predict.tables import TECHNIQUES, batch1_table, serving_table, steps_table

__all__ = ["ENGINES", "INSTALL_HINT", "PRECISION_ALIASES", "STAND_INS", "TECHNIQUES", "PredictUnavailableError",
           "StandIn", "available", "batch1_table", "claim_predictions", "model_path", "plot_batch1", "plot_steps",
           "predict", "recommend", "serving_table", "step_costs", "steps_table", "systems"]
