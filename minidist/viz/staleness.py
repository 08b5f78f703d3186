"""Pictures of asynchronous training: how stale gradients are, and who wins a straggler race.

Each function draws on a matplotlib ``ax`` it is given, so an example can put
several panels side by side and a slide can take one alone:

- ``staleness_histogram(ax, trials)``: for each trial, the share of its
  gradients at each staleness τ (1 + the updates a gradient missed), from
  ``parallel.ps.simulator.simulate``'s ``staleness`` counts;
- ``race_curves(ax, race)``: the test loss against the modelled clock for
  each consistency rule of a ``straggler_race`` (BSP, SSP(s), ASP).

Cost: O(points) to draw.
"""

from __future__ import annotations

from collections.abc import Iterable


def staleness_histogram(ax, trials: Iterable, label=lambda trial: f"λ={trial.learners}"):
    """One step curve per trial: the share of its gradients at each τ."""
    for trial in trials:
        taus, total = sorted(trial.staleness), sum(trial.staleness.values())
        ax.step(taus, [trial.staleness[t] / total for t in taus], where="mid",
                label=label(trial))
    ax.set_xlabel("staleness τ (1 + updates the gradient missed)")
    ax.set_ylabel("share of gradients")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)


def race_curves(ax, race) -> None:
    """Test loss (worker 0's reads) against modelled time, one curve per rule."""
    for rule, run in race.runs.items():
        label = f"ssp({race.staleness})" if rule == "ssp" else rule
        ax.plot([1e3 * t for t, *_ in run.curve], [loss for _, _, loss, _ in run.curve],
                label=label)
    ax.set_yscale("log")
    ax.set_xlabel("modelled ms")
    ax.set_ylabel("test loss (worker 0's reads)")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
