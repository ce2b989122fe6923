"""A run's config as the library reads it: a dict (DeepSpeed keys plus a "tierzero" section,
exactly the JSON file's content) or the path of such a file."""
import json
import os


def config_text(config):
    """(JSON text, source name for messages) of a dict or a path."""
    if isinstance(config, dict):
        return json.dumps(config), "<dict>"
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        with open(path, "r", encoding="utf-8") as f:
            return f.read(), path
    raise TypeError(f"config must be a dict or a path, not {type(config).__name__}")
