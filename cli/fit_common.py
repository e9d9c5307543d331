"""What the three ``toolgym fit-*`` command lines share: the arguments and the config they load."""
from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def config_from_args(args: Any, schema: type[T]) -> T:
    """The command's config: ``schema`` <- YAML <- ``key=value`` overrides <- ``--output-dir`` / ``--budget-minutes``."""
    from toolgym.trainers.config import load_config

    overrides = list(getattr(args, "overrides", None) or [])
    if args.output_dir:
        overrides.append(f"output_dir={args.output_dir}")
    if args.budget_minutes is not None:
        overrides.append(f"budget_minutes={args.budget_minutes}")
    return load_config(schema, args.config, overrides)


def add_config_arguments(parser: Any) -> None:
    parser.add_argument("config", help="YAML config (see configs/fit_*.yaml); key=value pairs after it override it")
    parser.add_argument("--output-dir", default=None, help="run folder (overrides output_dir of the config)")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="stop training after this many minutes (overrides budget_minutes; <= 0: no limit)")
    parser.add_argument("--print-config", action="store_true", help="print the merged config and exit")
