"""posttrain's configuration: one typed YAML schema, loaded, validated and derived before any work.

    cfg = load_config("examples/grpo.yaml", ["actor.ppo_epochs=2"])  # validated, frozen
    derived = derive(cfg, train_dataset_size=count_rows(cfg.data.train_files))
    for stage in stage_configs(cfg): ...                   # [Stage("main", cfg)] without stages
    save_resolved(cfg, run_dir, derived)                    # run_dir/config.yaml

`derive` returns a separate `Derived` record rather than editing the config: the saved config is
what the user asked for, and re-loads to the same run.
"""

from posttrain.config.access import world_size
from posttrain.config.checks import run_checks
from posttrain.config.derive import Derived, count_rows, derive
from posttrain.config.load import load_config, load_raw, save_resolved, to_dict, to_yaml
from posttrain.config.schema import Config, defaults_dict
from posttrain.config.validate import Stage, stage_configs, validate
from posttrain.errors import ConfigError

__all__ = [
    "Config",
    "ConfigError",
    "Derived",
    "Stage",
    "count_rows",
    "defaults_dict",
    "derive",
    "load_config",
    "load_raw",
    "run_checks",
    "save_resolved",
    "stage_configs",
    "to_dict",
    "to_yaml",
    "validate",
    "world_size",
]
