cd /work/wt-float && PYTHONPATH=$PWD nice /work/main/.venv/bin/python -c '
import json, sys, subprocess, platform, time, datetime
from workbench.studies import quant
from workbench.results import collect_provenance
f = sys.argv[1]; t0 = time.time(); start = datetime.datetime.now(datetime.UTC).isoformat()
cfg = quant.Config.from_name("demo", device="cpu", n_questions=2, subjects=None, formulation=f, speed=False, layer_configs=())
res = quant.run(cfg, model="smollm2-135m", store="/tmp/floatfmt_store", progress=False)
out = {"date_utc": start, "wall_s": time.time() - t0, "device": platform.processor() or open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
       "git_commit": subprocess.check_output(["git", "rev-parse", "HEAD"], text=True).strip(), "command": " ".join(sys.argv),
       "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.__dict__.items()}, "provenance": res.provenance,
       "grid": json.loads(res.grid.to_json(orient="records"))}
json.dump(out, open(f"benchmarks/results/2026-12-06_floatfmt/quality_{f}.json", "w"), indent=1, default=str)
' "$1"
