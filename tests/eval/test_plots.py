"""MMLU figures: chance level drawn, intervals that include chance marked, labels apart."""

import pandas as pd

from workbench.eval.mmlu import summarize_mmlu
from workbench.eval.plots import FLAG, plot_mmlu_by_shots, plot_mmlu_formulations, plot_mmlu_subjects

LP = {f"logprob_{c}": -1.0 for c in "ABCD"}


def _summary():
    rows = []
    for form, p in (("mmlu", 0.25), ("mmlu_continuation", 0.6)):  # letters at chance, cloze above it
        for shots in (0, 5):
            for s in ("a", "b"):
                n_right = int(40 * p)
                rows += [{"subject": s, "formulation": form, "n_shot": shots, "correct": i < n_right,
                          "correct_norm": i < n_right, **LP} for i in range(40)]
    return summarize_mmlu(pd.DataFrame(rows), metric=["acc", "acc_norm"])


def _hline_texts(fig):
    return {a.text: (a.y, a.xanchor, a.yanchor) for a in fig.layout.annotations}


def test_subjects_plot_marks_chance_and_keeps_labels_apart():
    s = _summary()
    fig = plot_mmlu_subjects(s, n_shot=5, formulation="mmlu")
    bars = fig.data[0]
    assert set(bars.marker.color) == {"#b0b0b0"}  # 10/40 per subject: every interval includes 0.25
    texts = _hline_texts(fig)
    micro = next(t for t in texts if t.startswith("micro"))
    macro = next(t for t in texts if t.startswith("macro"))
    assert FLAG in micro and FLAG in macro and "chance 0.25" in texts
    # all three lines sit at 0.25 here; their labels are on different sides or levels
    places = {(texts[t][1], texts[t][2]) for t in (micro, macro, "chance 0.25")}
    assert len(places) == 3
    fig = plot_mmlu_subjects(s, n_shot=5, formulation="mmlu_continuation")
    assert "#b0b0b0" not in set(fig.data[0].marker.color)  # 24/40: Wilson [0.45, 0.74]
    assert not any(FLAG in t for t in _hline_texts(fig))


def test_formulation_and_shots_plots_flag_chance():
    s = _summary()
    fig = plot_mmlu_formulations(s, n_shot=0)
    labels = list(fig.data[0].x)
    flagged = [x for x, t in zip(labels, fig.data[0].text) if FLAG in t]
    assert flagged == ["mmlu acc", "mmlu acc_norm"] and len(labels) == 4
    fig = plot_mmlu_by_shots(s)
    sym = {tr.name: set(tr.marker.symbol) for tr in fig.data}
    assert sym["mmlu micro"] == {"circle-open"} and sym["mmlu_continuation micro"] == {"circle"}
    assert any(a.text == "chance 0.25" for a in fig.layout.annotations)
