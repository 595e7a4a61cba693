"""``kvscope plan``'s step-time table: the planner's roofline, the fitted roofline and
AIConfigurator's measured kernels side by side (seconds), with each one's expected error.

The fitted roofline and the AIC adapter live in :mod:`kvscope.sim.roofline` and
:mod:`kvscope.sim.cost_aic`; this module only picks the plan's three steps and renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from kvscope.plan.config import Parallelism
    from kvscope.plan.memory import MemoryPlan
    from kvscope.plan.performance import Performance
    from kvscope.specs.hardware import GPUSpec
    from kvscope.specs.model import ModelSpec


def _ms(s: float) -> str:
    return f"{s * 1e3:,.2f} ms"


#: The speed section's steps, as (prefill tokens, prefill requests, their attended tokens,
#: decodes, decode attended tokens) from the plan's batch, context and prefill chunk.
def _step_shapes(perf: Performance) -> dict[str, tuple[int, int, int, int, int]]:
    r = perf.roofline
    b, ctx, chunk = r.decode.batch, r.decode.context, r.prefill.tokens
    return {
        "decode_batch1": (0, 0, 0, 1, perf.latency.context),
        "decode": (0, 0, 0, b, b * ctx),
        "prefill": (chunk, 1, chunk, 0, 0),
    }


def step_models(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    mem: MemoryPlan,
    perf: Performance,
    engine: str,
    cost_model: str = "roofline",
) -> dict[str, Any]:
    """The speed section's three steps under each cost model, with the expected error.

    The planner's roofline always; the fitted roofline (:mod:`kvscope.sim.roofline`) and,
    with ``cost_model`` aic, AIConfigurator's measured kernels (:mod:`kvscope.sim.cost_aic`)
    where the layout is one TP group (they price no pipeline or data-parallel split).
    """
    import warnings

    from kvscope.errors import KvscopeError
    from kvscope.sim.roofline import FittedRoofline, FitTerms, expected_error, family_of

    if cost_model not in ("roofline", "fitted", "aic"):
        raise KvscopeError(f"--cost-model must be roofline, fitted or aic, got '{cost_model}'.")
    fam = family_of(model)
    shapes = _step_shapes(perf)
    planner = {
        "decode_batch1": perf.latency.step_s,
        "decode": perf.roofline.decode.step_s,
        "prefill": perf.roofline.prefill.step_s,
    }
    out: dict[str, Any] = {
        "family": fam,
        "shapes": {k: list(v) for k, v in shapes.items()},
        "models": {
            "roofline": {"step_s": planner, "expected_error": expected_error("planner", fam)}
        },
        "note": None,
    }
    if par.pp > 1 or par.dp > 1:
        out["note"] = "fitted and measured step times price one TP group: not shown with PP/DP"
        return out
    fitted = FittedRoofline(
        FitTerms.from_specs(model, gpu, tp=par.tp, kv_cache_dtype=mem.kv_cache_dtype)
    )
    out["models"]["fitted"] = {
        "step_s": {k: fitted.shape_time(*s) for k, s in shapes.items()},
        "expected_error": expected_error("fitted", fam),
    }
    if cost_model != "aic":
        return out
    from kvscope.sim.cost_aic import AicCostModel, build_aic

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aic = build_aic(
            fitted, model.name, gpu.name, engine, par.tp, mem.kv_cache_dtype,
            par.tp if par.ep else 1,
        )  # fmt: skip
        if isinstance(aic, AicCostModel):
            times = {
                k: aic.decode_s(s[3], s[4]) if not s[0] else aic.mixed_s(*s)
                for k, s in shapes.items()
            }
            if not aic.missed:
                out["models"]["aic"] = {"step_s": times, "source": aic.describe()["source"]}
    if "aic" not in out["models"]:
        out["note"] = "; ".join(str(w.message) for w in caught) or "AIC could not price it"
    return out


def step_models_table(steps: dict[str, Any]) -> Table:
    """The three steps side by side under each cost model (ms), expected error below."""
    from rich.table import Table

    models = steps["models"]
    tab = Table(title="Step time by cost model", title_justify="left")
    tab.add_column("step")
    for name in models:
        tab.add_column(name, justify="right")
    titles = {"decode_batch1": "decode, batch 1", "decode": "decode, serving batch"}
    for key, shape in steps["shapes"].items():
        title = titles.get(key, f"prefill chunk of {shape[0]:,}")
        if key == "decode":
            title = f"decode, batch {shape[3]:,}"
        tab.add_row(title, *[_ms(m["step_s"][key]) for m in models.values()])
    notes = []
    for name, m in models.items():
        err = m.get("expected_error")
        if err:
            notes.append(
                f"{name}: median {err['median_abs_err']:.0%}, P90 {err['p90_abs_err']:.0%} "
                f"off AIConfigurator on held-out {err['family']} points"
            )
        elif name == "aic":
            notes.append(f"aic: {m['source']}")
    if steps.get("note"):
        notes.append(steps["note"])
    tab.caption = "; ".join(notes)
    return tab
