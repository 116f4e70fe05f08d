"""Policy decisions: a kept compiled plan per query against compiling the bundle on every decision.

Every approval, promotion and admission decision evaluates the shipped Rego bundle. The baseline, measured in the
same run, is what each decision did before plans were kept: a fresh regopy interpreter with every module and
data.json loaded, then the query (rego-cpp compiles the modules on each query). The engine compiles each query once
(``Interpreter.build``, once per process: round 1 includes it) and runs the plan on a fresh interpreter
holding only the input. Both answer the same decision, checked each round. CPU seconds per decision, so a loaded
machine stretches both alike.

    .venv/bin/python bench/policy.py --decisions 200 --rounds 3
"""

from __future__ import annotations

import argparse
import time

from registry.domain.policy_input import promotion_input
from registry.policy import PolicyEngine, default_policy_dir
from registry.signing.canonical import canonical_json


def _compile_each_time(engine: PolicyEngine, input_doc: dict) -> dict:
    rego = engine.interpreter()
    rego.set_input_term(canonical_json(input_doc).decode())
    return rego.query("data.modelreg.promotion.decision").results[0].expressions[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    input_doc = promotion_input(principal="alice", is_admin=False, capacities=["promoter"], alias="prod",
                                target=(3, "approved"))
    for round_ in range(1, args.rounds + 1):
        engine = PolicyEngine.from_directory(default_policy_dir())
        started = time.process_time()
        for _ in range(args.decisions):
            old = _compile_each_time(engine, input_doc)
        old_s = (time.process_time() - started) / args.decisions
        started = time.process_time()
        for _ in range(args.decisions):
            new = engine.promotion(input_doc)
        new_s = (time.process_time() - started) / args.decisions
        same = "same decision" if {"unmet": new.unmet} == {"unmet": old.get("unmet", [])} else "DIFFERENT decisions"
        print(f"round {round_}: {args.decisions} promotion decisions, compiled each time {old_s * 1000:.2f} ms CPU, "
              f"kept plan {new_s * 1000:.2f} ms CPU, old/new {old_s / new_s:.1f}x "
              f"({same}: {new.outcome})", flush=True)


if __name__ == "__main__":
    main()
