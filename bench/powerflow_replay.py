"""Replay of the power-flow sensitivities (issue 26): the largest change of what a zone releases when one load
entry moves by beta, against the paper's constants of Sec. 6.1.1 (docs/powerflow.md, "Sensitivities").

Uses the replay of ``tests/test_powerflow_sensitivity.py`` (the CVXPY gradient of Eq. (28), and Eq. (9) as its
own CVXPY projection) and prints, per case and zone: the gradient change over 2 beta in l2 and l1, the same after
projecting onto the flow equalities, and (case14) OutPert's noiseless release change over beta at t = 1 and 4.

    PYTHONPATH=. python bench/powerflow_replay.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

from privcvx.localsolve import CERTIFIED_ERROR

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_powerflow_sensitivity import (  # noqa: E402
    BETA,
    PARTITIONS,
    ProjectedStep,
    _cvxpy_gradient,
    _default_output_perturbations,
    _moved_loads,
    _onto_flow_equalities,
    _valid_problem,
)


def gradient_ratios() -> None:
    for case in sorted(PARTITIONS):
        problem = _valid_problem(case)
        for agent, model in zip(problem.agents, problem.info["models"], strict=True):
            project = _onto_flow_equalities(model)
            x = np.zeros(model.x.size)
            base = _cvxpy_gradient(agent, model, x)
            changes = []
            for _ in _moved_loads(model):
                changes.append(_cvxpy_gradient(agent, model, x) - base)
            l2 = max(np.linalg.norm(c) for c in changes) / (2 * BETA)
            l1 = max(np.abs(c).sum() for c in changes) / (2 * BETA)
            projected = max(np.linalg.norm(project(c)) for c in changes) / (2 * BETA)
            print(f"{case:16s} {agent.name:8s} gradient/2beta l2 {l2:.3f} l1 {l1:.3f} projected l2 {projected:.3f}")


def release_ratios() -> None:
    problem, outputs = _default_output_perturbations("case14")
    centralized = problem.solve_centralized()
    for t in (1, 4):
        rho, inverse = 100.0, np.sqrt(t)
        for k, (agent, model, layout) in enumerate(zip(problem.agents, problem.info["models"], problem.layouts,
                                                       strict=True)):
            weights = inverse + rho * layout.shared_mask
            step = ProjectedStep(agent, model, weights)
            start = step(np.zeros(model.x.size))
            worst = 0.0
            for z in (start, centralized.z[k], 0.5 * (start + centralized.z[k])):
                shift = np.zeros(model.x.size)
                shift[layout.shared_local] = rho * z[layout.shared_local]
                base = step((inverse * z - _cvxpy_gradient(agent, model, z) + shift) / weights)
                for _ in _moved_loads(model):
                    moved = step((inverse * z - _cvxpy_gradient(agent, model, z) + shift) / weights)
                    worst = max(worst, np.linalg.norm(moved - base))
            derived = outputs[0].release_sensitivity(agent.sensitivity, weights, False, CERTIFIED_ERROR).l2
            print(f"case14 t={t} {agent.name}: release change / beta {worst / BETA:.3f}, "
                  f"derived l2 / beta {derived / BETA:.3f}")


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    gradient_ratios()
    release_ratios()
