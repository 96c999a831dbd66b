"""Read training/serving configs and command lines for G10, by value.

A grep for ``tensor_parallel`` flags ``parallelism_config_tp_size: 1``; here each file is parsed
(YAML, JSON, TOML, ``.py`` through ``ast``, else shell text) and a finding keeps the key path and
its value. Configs come from anywhere: size, parsing, walking and searching are all bounded, and
every limit hit is a reason, never an exception. YAML goes through PyYAML's safe loader.

This module is the probe's face; the work lives in three: :mod:`.config_values` (the keys and flags
G10 reads, a document walked, a command line's flags), :mod:`.config_files` (one file read and
parsed) and :mod:`.config_search` (the bounded search of the rootdir).
"""

from __future__ import annotations

from pytest_dgx_spark.probes.config_files import (
    CONFIG_SUFFIXES,
    MAX_YAML_NESTING,
    parse_error,
    read_config,
    yaml_nesting,
)
from pytest_dgx_spark.probes.config_search import (
    PACKAGE_DIR,
    SKIP_DIRS,
    SKIP_FILES,
    Scan,
    data_folder,
    find_configs,
    read_found,
    report_output,
)
from pytest_dgx_spark.probes.config_values import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    MAX_STRING,
    Finding,
    Source,
    as_count,
    classify,
    command_lines,
    make_finding,
    norm,
    parse_argv,
    parse_command_text,
    process_sources,
    serving_marker,
    walk,
)

__all__ = [
    "CONFIG_SUFFIXES", "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "MAX_STRING", "MAX_YAML_NESTING",
    "PACKAGE_DIR", "SKIP_DIRS", "SKIP_FILES", "Finding", "Scan", "Source", "as_count", "classify",
    "command_lines", "data_folder", "find_configs", "make_finding", "norm", "parse_argv",
    "parse_command_text", "parse_error", "process_sources", "read_config", "read_found", "report_output",
    "serving_marker", "walk", "yaml_nesting",
]  # fmt: skip
