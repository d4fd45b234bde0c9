"""``fleetcast memory``: the memory plan of one replica (``sim.catalog.memory``), nothing
simulated."""

from __future__ import annotations

from collections.abc import Callable

from sim.config.compose import compose_config
from sim.errors import ConfigError


def main(argv: list[str], run_hydra: Callable[[list[str]], None]) -> None:
    """``fleetcast memory [OVERRIDE ...]``: one replica's memory plan. Its overrides are a run's,
    and so is ``--cfg job`` (or ``hydra``, ``all``, with ``--resolve``, ``--package``): the
    composed config, printed by Hydra as for ``fleetcast --cfg job`` with the same overrides.
    Other flags (``-m``: a sweep) have no memory plan: refused (ConfigError), as is a config
    that cannot be deployed. ``run_hydra`` runs Hydra on a command line (``sim.cli``)."""
    # imported here: the schema, the catalog and Hydra's parser (~90 ms of CPU), for this
    # command only
    from hydra._internal.utils import get_args_parser

    from sim.catalog.deployment import build_deployment
    from sim.catalog.memory import format_plan
    from sim.config.schema import DeploymentConfig

    flags = [a for a in argv if a.startswith("-")]
    if flags:
        args = get_args_parser().parse_args(argv)
        printing = {"--cfg", "-c", "--resolve", "--package", "-p"}
        if args.cfg is None or not set(flags) <= printing:
            raise ConfigError(
                "flags",
                " ".join(flags),
                "fleetcast memory takes overrides, and --cfg job to print their config",
            )
        run_hydra(argv)  # (Hydra prints the config and runs no task)
        return
    overrides = argv
    cfg = compose_config(overrides)
    checked = DeploymentConfig.from_config(
        {k: cfg[k] for k in DeploymentConfig.model_fields if k in cfg}
    )
    dep = build_deployment(checked)
    asked = checked.memory.request_tokens
    if asked is not None:
        lengths = [asked]
    else:
        lengths = [n for n in (512, 2048, 8192, 32768, 131072) if n <= dep.model.max_context_tokens]
    print(
        format_plan(
            dep.memory, dep.model, dep.gpu, dep.weights_precision, dep.kv_precision, lengths
        )
    )
