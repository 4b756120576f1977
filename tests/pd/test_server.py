"""workbench.pd.server against a fake OpenAI server with known step times (no vLLM needed).

The fake streams a completion as a server whose requests never share steps would: the first chunk after
``A + B * prompt_len`` ms, then one chunk every ``D`` ms. The profile must recover ``A``, ``B`` and ``D`` and
the workload's TTFT / TPOT must equal them; a planted bug (TPOT taken over all ``n`` tokens instead of the
``n - 1`` gaps) shows the TPOT check has the power to fail. The step times are long (100-350 ms) and the bounds
relative, because a loaded 2-core machine delays a sleeping thread by tens of ms (a +25 ms bound on a 140 ms step
failed once beside another job); the minimum over repeats is checked, since delays only add."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from workbench.pd import CostModel
from workbench.pd import server as srv
from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload

A_MS, B_MS, D_MS = 150.0, 0.5, 100.0


class Fake(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not isinstance(body["prompt"], list) or not body.get("ignore_eos"):
            self.send_response(400)
            self.end_headers()
            return
        n = body["max_tokens"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep((A_MS + B_MS * len(body["prompt"])) / 1e3)
        for i in range(n):
            if i:
                time.sleep(D_MS / 1e3)
            self.wfile.write(b"data: " + json.dumps({"choices": [{"text": "x"}]}).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: " + json.dumps({"choices": [], "usage": {"completion_tokens": n}}).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
def url():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_profile_recovers_the_step_times(url):
    prof = srv.profile_server(url, "m", vocab=5000, prompt_lens=(40, 200, 400), prefill_batches=(1,),
                              decode_batches=(1, 2, 4), context_lens=(32,), decode_tokens=6, repeats=3, warmup=0)
    assert set(prof["phase"]) == {"prefill", "decode"} and len(prof) == 6
    pre = prof[prof["phase"] == "prefill"].set_index("seq_len")["ms_min"]
    for L in (40, 200, 400):
        assert A_MS + B_MS * L <= pre[L] <= 1.3 * (A_MS + B_MS * L)
    dec = prof[prof["phase"] == "decode"]["ms_min"]
    assert ((dec >= 0.9 * D_MS) & (dec <= 1.3 * D_MS)).all()
    cost = CostModel.fit(prof)
    assert cost.prefill_ms(200, 0) == pytest.approx(A_MS + 200 * B_MS, rel=0.3)


def test_workload_ttft_and_tpot_are_the_known_step_times(url):
    wl = generate_workload(WorkloadConfig(n_requests=6, rate=20.0, prompt=LengthDist("fixed", 80),
                                          output=LengthDist("uniform", low=4, high=6), seed=0))
    df = srv.run_workload(url, "m", wl, vocab=5000)
    assert len(df) == 6 and (df["output_len"].to_numpy() == wl.output_len).all()
    assert (df["completion_tokens"].to_numpy() == wl.output_len).all()
    assert np.allclose(df["arrival_s"], wl.arrival_s, atol=0.05)  # sent on time
    ttft = A_MS + B_MS * 80
    assert ((df["ttft_ms"] >= ttft) & (df["ttft_ms"] <= 1.3 * ttft)).all()
    assert ((df["tpot_ms"] >= 0.9 * D_MS) & (df["tpot_ms"] <= 1.3 * D_MS)).all()
    # planted bug: (E2E - TTFT) / n instead of / (n - 1) (at most 5/6 of D here) fails the same check
    bug = (df["e2e_ms"] - df["ttft_ms"]) / df["output_len"]
    assert not ((bug >= 0.9 * D_MS) & (bug <= 1.3 * D_MS)).all()


def test_a_server_that_stops_early_is_named(url, monkeypatch):
    real = srv.stream_completion

    def one_token(*a, **k):
        t, times, _ = real(*a, **k)
        return t, times[:1], 1

    monkeypatch.setattr(srv, "stream_completion", one_token)
    wl = generate_workload(WorkloadConfig(n_requests=1, rate=10.0, prompt=LengthDist("fixed", 8),
                                          output=LengthDist("fixed", 4), seed=0))
    with pytest.raises(RuntimeError, match="ignore_eos"):
        srv.run_workload(url, "m", wl, vocab=5000)


def test_vllm_sim_config_is_chunked_under_the_token_budget():
    c = srv.vllm_sim_config(16, 128)
    assert (c.policy, c.max_batch, c.chunk_budget, c.max_prefill_tokens) == ("chunked", 16, 128, 128)
